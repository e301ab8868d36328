//go:build race

package lease

// raceEnabled is true under -race: measurements that take seconds there
// (and measure nothing about races) skip.
const raceEnabled = true
