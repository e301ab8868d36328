//go:build !race

package modeltest

const raceEnabled = false
