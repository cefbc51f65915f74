// Package mix holds splitmix64's finaliser, a bijective 64-bit mixer: the
// one copy behind the index's held-prefix table, the router's rendezvous
// placement and the fleet simulator's pseudo-random streams. It imports
// nothing of kvroute.
package mix

// Mix64 is splitmix64's finaliser (Steele, Lea and Flood, "Fast splittable
// pseudorandom number generators", 2014): every output bit depends on every
// input bit, and distinct inputs give distinct outputs.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
