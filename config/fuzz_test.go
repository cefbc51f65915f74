package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the config parser: it must return a
// config or an error, never panic, and a config it returns must validate.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "examples", "kvroute.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(minimal))
	f.Add([]byte("pools: [{name: a, models: [m], replicas: [{name: r, address: '1.2.3.4:5'}]}]"))
	f.Add([]byte("a: &x [*x]"))
	f.Add([]byte("pools: !!binary aGVsbG8="))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse returned a config that does not validate: %v", err)
		}
	})
}
