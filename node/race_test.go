//go:build race

package node

// raceEnabled: the race detector allocates, so allocation tests skip.
const raceEnabled = true
