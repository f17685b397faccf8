//go:build race

package telemetry

// raceEnabled: the race detector is on (it slows allocation-heavy tests
// tenfold and adds nothing to single-goroutine ones).
const raceEnabled = true
