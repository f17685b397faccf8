// Package poll waits in tests for something another goroutine or process
// does: the one polling helper of the project's tests.
package poll

import (
	"testing"
	"time"
)

// Timeout is how long Until waits before it fails the test.
const Timeout = 5 * time.Second

// Until calls cond every few milliseconds until it returns true, and fails
// the test with "timed out waiting for <what>" if it still returns false
// after Timeout.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Within(tb, Timeout, what, cond)
}

// Within is Until with its own timeout.
func Within(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
