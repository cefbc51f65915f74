//go:build race

package rhmap

// raceEnabled: under the race detector every atomic load synchronises
// clocks with every goroutine the program has had, which costs far more than
// a prefetch saves (a thousand concurrent ext_proc streams each prefetching
// a request's blocks), so Hint.Prefetch does nothing there.
const raceEnabled = true
