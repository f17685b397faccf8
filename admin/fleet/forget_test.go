package fleet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
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
	if err := s.ForgetRule(context.Background(), "sluice", "r"); !errors.Is(err, ErrCannotForget) {
		t.Fatalf("ForgetRule = %v, want ErrCannotForget", err)
	}
}

func TestForgetRuleGivesEveryIdentityOfTheRuleAFreshStateAndNoOtherRule(t *testing.T) {
	forEachBackend(t, testForgetRule)
}

func testForgetRule(t *testing.T, b Backend) {
	clock := newOffsetClock()
	clock.set(30 * time.Minute)
	bucket := redisgcra.Limit{Rate: 0.001, Burst: 3}
	rules := &StaticRules{
		// per_key2 starts with per_key's name; perXkey is what LIKE
		// 'per_key' would match too.
		Limits: map[string]redisgcra.Limit{"per_key": bucket, "per_key2": bucket, "perXkey": bucket},
		Windows: map[string]Window{
			"fixed":   {Limit: 3, Seconds: 3600},
			"fixed2":  {Limit: 3, Seconds: 3600},
			"slide":   {Limit: 3, Seconds: 3600, Sliding: true},
			"rolling": {Limit: 3, Seconds: 600, Periods: 6},
		},
	}
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	call := func(domain, rule, id string, hits int64) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, _, err := s.call(t, "n1", &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(rule, id, hits, false)}})
		if err != nil {
			t.Fatalf("%s %s: %v", domain, rule, err)
		}
		return resp.Statuses[0]
	}
	var ids []string
	for i := range 30 {
		ids = append(ids, string(state.AppendSluiceID(nil, fmt.Sprint("client-", i))))
	}
	reset := []string{"per_key", "fixed", "slide", "rolling"}
	kept := []struct{ domain, rule string }{{"sluice", "per_key2"}, {"sluice", "perXkey"}, {"sluice", "fixed2"}, {"other", "per_key"}, {"other", "fixed"}}
	for _, rule := range reset {
		for _, id := range ids {
			checkStatus(t, rule+": spend all 3", call("sluice", rule, id, 3), OK, 0)
		}
	}
	for _, k := range kept {
		checkStatus(t, k.domain+" "+k.rule+": spend all 3", call(k.domain, k.rule, ids[0], 3), OK, 0)
	}
	for _, rule := range reset {
		if err := s.srv.ForgetRule(context.Background(), "sluice", rule); err != nil {
			t.Fatalf("%s: ForgetRule: %v", rule, err)
		}
		for _, id := range ids {
			checkStatus(t, rule+": every identity after the reset", call("sluice", rule, id, 3), OK, 0)
		}
	}
	for _, k := range kept {
		checkStatus(t, k.domain+" "+k.rule+": not reset", call(k.domain, k.rule, ids[0], 1), OVER, 0)
	}
	// A sliding window's previous window is forgotten with the current.
	clock.set(90 * time.Minute)
	checkStatus(t, "slide: the previous window weighs", call("sluice", "slide", ids[1], 3), OVER, 1)
	if err := s.srv.ForgetRule(context.Background(), "sluice", "slide"); err != nil {
		t.Fatal(err)
	}
	checkStatus(t, "slide: after a second reset", call("sluice", "slide", ids[1], 3), OK, 0)
}

// runOnly is a Backend without Forget.
type runOnly struct{}

func (runOnly) Run(context.Context, []redisgcra.Op) ([]redisgcra.Outcome, error) { return nil, nil }
func (runOnly) Ping(context.Context) error                                       { return nil }
