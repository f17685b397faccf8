package filter_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policy/policytest"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// TestSimulatorDecidesLikeTheCompiledFilterUnderRandomPolicies is the
// comparison of TestSimulatorDecidesLikeTheCompiledFilter over random
// configurations: policies of limit, exempt, unlimited and deny rules in either mode
// (limit rules now and then enforced on a share of their identities, token
// buckets now and then blocking the identities they refuse),
// with every local algorithm, match operators on every source, one or two
// limit keys, costs from headers and query parameters, overrides, and the
// configuration's response-field, status and X-Forwarded-For settings. Each
// configuration gets random requests from a small population; the compiled
// filter and the simulator must agree on every one.
// SLUICE_AGREE_SEED=N runs other configurations.
func TestSimulatorDecidesLikeTheCompiledFilterUnderRandomPolicies(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, policytest.Seed(t)))
	var total outcomeCounts
	for c := range 24 {
		doc := policytest.Config(rng)
		cfg, err := policy.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("configuration %d is invalid (a bug of the generator): %v\n%s", c, err, doc)
		}
		f := start(t, doc, 1)
		total.add(compareRequests(t, f, cfg, rng, 150, fmt.Sprintf("configuration %d:\n%s\n", c, doc)))
	}
	if total.rejected < 100 || total.allowed < 100 || total.denied < 10 || total.shadowMarked < 5 || total.withFields < 50 || total.spared < 5 || total.blocked < 5 {
		t.Errorf("the configurations exercised too little: %+v", total)
	}
}

type outcomeCounts struct{ allowed, rejected, denied, shadowMarked, withFields, spared, blocked int }

func (c *outcomeCounts) add(o outcomeCounts) {
	c.allowed, c.rejected, c.denied = c.allowed+o.allowed, c.rejected+o.rejected, c.denied+o.denied
	c.shadowMarked, c.withFields = c.shadowMarked+o.shadowMarked, c.withFields+o.withFields
	c.spared, c.blocked = c.spared+o.spared, c.blocked+o.blocked
}

// compareRequests sends n random requests through the filter and the
// simulator, the simulator carrying its own state, and fails at the first
// difference in status, body, response fields or shadow marking.
func compareRequests(t *testing.T, f *fixture, cfg *policy.Config, rng *rand.Rand, n int, context string) outcomeCounts {
	t.Helper()
	type key struct{ rule, identity string }
	states := map[key]simulate.State{}
	lookup := func(r *policy.Rule, id string) (simulate.State, bool) {
		s, ok := states[key{r.Name, id}]
		return s, ok
	}
	shadowHeader := cfg.ShadowHeader
	marking := false // a shadow rule marks: the filter owns the shadow header
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			marking = marking || r.Marks()
		}
	}
	var out outcomeCounts
	for i := range n {
		f.clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		req := policytest.Request(rng, shadowHeader)
		now := limiter.Seconds(f.clock.Now().UnixNano())
		sim := simulate.Run(cfg, req, simulate.Options{Now: now, Lookup: lookup})
		got := f.doOn(0, toWasmRequest(req))
		where := fmt.Sprintf("%srequest %d (%s %s %s, %v)", context, i, req.Method, req.Path, req.ClientAddress, req.Headers)
		want := sim.Upstream
		if forged, ok := req.Headers[shadowHeader]; ok && !marking {
			// Nothing in the configuration vouches for the header: the
			// filter leaves a client's value as it is.
			want = [][2]string{{shadowHeader, forged}}
		}
		sameAnswer(t, where, got, sim, shadowHeader, want)
		switch {
		case got.Rejected && got.Local.Status != cfg.RejectStatus:
			out.rejected++
			out.denied++
		case got.Rejected:
			out.rejected++
		default:
			out.allowed++
			if len(pick(got.ResponseHeaders, rateLimitFields)) > 0 {
				out.withFields++
			}
			if up := pick(got.UpstreamHeaders, []string{shadowHeader}); len(up) > 0 && up[0][1] != "forged" {
				out.shadowMarked++
			}
		}
		for _, p := range sim.Policies {
			for _, r := range p.Rules {
				if r.Spared && !r.Decision.Allowed {
					out.spared++
				}
				if r.Blocked {
					out.blocked++
				}
			}
		}
		for _, s := range sim.Stores() {
			states[key{s.Rule, s.Identity}] = s.State
		}
	}
	return out
}
