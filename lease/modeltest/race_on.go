//go:build race

package modeltest

// raceEnabled is true under -race, where Run checks a fifth of the seeds:
// the harness drives the Managers from one goroutine, so the detector
// learns little from more of them, and each step costs about ten times
// as much.
const raceEnabled = true
