//go:build race

package pigeon_test

// Under the race detector sync.Pool drops some of what it is given, so
// allocation counts of pooled paths say nothing.
func init() { raceEnabled = true }
