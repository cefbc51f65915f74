//go:build !amd64 || purego

package chattemplate

// plainRun16 is json_amd64.s's vector loop where there is none: it leaves
// every byte to plainRun's word loop.
func plainRun16(s []byte, i int) int { return i }
