package auth

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkThrottleCheck is the cost the throttle adds to every bearer
// request (a lookup of the address, no failures).
func BenchmarkThrottleCheck(b *testing.B) {
	th := NewThrottle(ThrottleConfig{})
	for i := range 10_000 {
		th.Fail("bearer", "10.9."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), "")
	}
	b.ReportAllocs()
	for b.Loop() {
		th.Check("192.0.2.1", "")
	}
}

// BenchmarkAuthenticateAPIToken is an API request's authentication with a
// user's token: a SHA-256 and one indexed SQLite read (the last use is
// written at most once a minute).
func BenchmarkAuthenticateAPIToken(b *testing.B) {
	ctx := context.Background()
	st := openStoreB(b)
	m, _, err := Setup(ctx, st, "the-bootstrap-admin-token")
	if err != nil {
		b.Fatal(err)
	}
	m.SetPasswordCost(4)
	if err := m.CreateUser(ctx, "ci", RoleViewer, "a long enough password"); err != nil {
		b.Fatal(err)
	}
	tok, _, err := m.CreateToken(ctx, "ci", "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Authenticate(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}
