// Package poll waits in tests for something another goroutine or process
// does: the one polling helper of the project's tests.
package poll

import (
	"testing"
	"time"
)

// Timeout is how long Until waits before it fails the test.
const Timeout = 5 * time.Second

// Interval is how often Until and Within check their condition.
const Interval = 5 * time.Millisecond

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
	Watch(tb, timeout, Interval, what, func() (bool, string) { return cond(), "" })
}

// Watch calls check every interval until it reports done, and fails the
// test after timeout with "timed out after <timeout> waiting for <what>;
// last seen: <seen>", seen being what the last check observed (a body, a
// counter), so the failure says why the wait did not end. A check that
// observed nothing worth showing returns "" and the failure is "timed out
// waiting for <what>". A check may act between checks (send a request
// that warms a path up): interval paces it.
func Watch(tb testing.TB, timeout, interval time.Duration, what string, check func() (done bool, seen string)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, seen := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			if seen == "" {
				tb.Fatalf("timed out waiting for %s", what)
			} else {
				tb.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, seen)
			}
			return
		}
		time.Sleep(interval)
	}
}
