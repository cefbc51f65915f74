//go:build !unix

package extproc

import "time"

// processCPU is not measured off unix: benchmarks then report 0.
func processCPU() time.Duration { return 0 }
