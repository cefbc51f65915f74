//go:build !unix

package routetest

import "time"

// ProcessCPU is not measured off unix: benchmarks then report 0.
func ProcessCPU() time.Duration { return 0 }
