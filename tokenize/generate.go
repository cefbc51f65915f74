package tokenize

// unicode16.go needs the Unicode 16.0.0 data that `make testdata` fetches.
//go:generate go run ./internal/unicode16gen -data ../.cache/unicode-16.0.0 -o unicode16.go
