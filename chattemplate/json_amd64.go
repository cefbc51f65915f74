//go:build !purego

package chattemplate

// plainRun16 returns the index of the first byte at or after i in s that is
// not plain (jsonPlain), looking at sixteen bytes at a time with SSE2 (every
// amd64 CPU has it); it stops early, at the last i from which fewer than
// sixteen bytes remain, for plainRun to finish. See json_amd64.s.
//
//go:noescape
func plainRun16(s []byte, i int) int
