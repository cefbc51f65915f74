//go:build !race

package rhmap

// raceEnabled is true under the race detector (race.go).
const raceEnabled = false
