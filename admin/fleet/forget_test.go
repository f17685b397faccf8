package fleet

import (
	"context"
	"errors"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/shared/state"
)

func TestForgetGivesOneIdentityAFreshStateInEveryKindOfGlobalRule(t *testing.T) {
	forEachBackend(t, testForget)
}

func testForget(t *testing.T, b Backend) {
	clock := newOffsetClock()
	clock.set(30 * time.Minute)
	rules := &StaticRules{
		Limits: map[string]redisgcra.Limit{"bucket": {Rate: 0.001, Burst: 3}},
		Windows: map[string]Window{
			"fixed":   {Limit: 3, Seconds: 3600},
			"slide":   {Limit: 3, Seconds: 3600, Sliding: true},
			"rolling": {Limit: 3, Seconds: 600, Periods: 6},
		},
	}
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	acme, beta := string(state.AppendSluiceID(nil, "acme")), string(state.AppendSluiceID(nil, "beta"))
	for _, rule := range []string{"bucket", "fixed", "slide", "rolling"} {
		for _, id := range []string{acme, beta} {
			checkStatus(t, rule+": spend all 3", s.mustCall(t, "n1", desc(rule, id, 3, false)).Statuses[0], OK, 0)
		}
		if err := s.srv.Forget(context.Background(), "sluice", rule, "acme"); err != nil {
			t.Fatalf("%s: Forget: %v", rule, err)
		}
		checkStatus(t, rule+": acme after the reset", s.mustCall(t, "n1", desc(rule, acme, 3, false)).Statuses[0], OK, 0)
		checkStatus(t, rule+": beta, not reset", s.mustCall(t, "n1", desc(rule, beta, 1, false)).Statuses[0], OVER, 0)
	}
	// A sliding window's previous window counts too: forgotten with it.
	clock.set(90 * time.Minute)
	checkStatus(t, "slide: acme's previous window weighs", s.mustCall(t, "n1", desc("slide", acme, 3, false)).Statuses[0], OVER, 1)
	if err := s.srv.Forget(context.Background(), "sluice", "slide", "acme"); err != nil {
		t.Fatal(err)
	}
	checkStatus(t, "slide: acme after a second reset", s.mustCall(t, "n1", desc("slide", acme, 3, false)).Statuses[0], OK, 0)
}

func TestForgetNeedsABackendThatCanForget(t *testing.T) {
	s := NewServer(Options{Backend: runOnly{}, Rules: &StaticRules{}})
	if err := s.Forget(context.Background(), "sluice", "r", "k"); !errors.Is(err, ErrCannotForget) {
		t.Fatalf("Forget = %v, want ErrCannotForget", err)
	}
}

// runOnly is a Backend without Forget.
type runOnly struct{}

func (runOnly) Run(context.Context, []redisgcra.Op) ([]redisgcra.Outcome, error) { return nil, nil }
func (runOnly) Ping(context.Context) error                                       { return nil }
