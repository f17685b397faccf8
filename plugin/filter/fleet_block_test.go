package filter

import (
	"math"
	"testing"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/rls"
)

// A block names the refused request's cost in whole tokens, rounded up
// against the client, at least one; a cost charged from the response
// names one token, a counted status its fixed cost.
func TestBlockNamesTheRequestsCostInWholeTokens(t *testing.T) {
	plain, byResponse, byStatus := &compiledRule{}, &compiledRule{respCost: true}, &compiledRule{respCost: true, respStatus: true, fixedCost: 2}
	for _, c := range []struct {
		r    *compiledRule
		cost float64
		want int64
	}{
		{plain, 1, 1}, {plain, 2.5, 3}, {plain, 0, 1}, {plain, 0.001, 1}, {plain, math.NaN(), 1}, {plain, math.Inf(1), 1 << 52},
		{byResponse, 40, 1}, {byStatus, 7, 2},
	} {
		if got := blockTokens(c.r, c.cost); got != c.want {
			t.Errorf("cost %v (response %v, status %v): %d tokens, want %d", c.cost, c.r.respCost, c.r.respStatus, got, c.want)
		}
	}
}

// A bucket below empty is denied until it holds n tokens again: the time
// until full, less the burst's refill, plus n's. Not below empty, or a
// rule without a rate: nothing.
func TestBelowEmptyWaitIsTheBlockLeftPlusTheRequestsTokens(t *testing.T) {
	r := &compiledRule{fleet: &ruleFleet{tb: limiter.TokenBucket{Rate: 2, Burst: 10}}}
	status := func(ms int64) *rls.Status {
		return &rls.Status{HasReset: true, ResetSeconds: ms / 1000, ResetNanos: int32(ms%1000) * 1e6}
	}
	for _, c := range []struct {
		resetMS, n, want int64
	}{
		{65_000, 1, 60_500}, // 5 s refill the burst: 60 s below empty, then half a second a token
		{65_000, 0, 60_000},
		{5_000, 1, 0}, // exactly empty: not below
		{3_000, 4, 0},
		{0, 1, 0},
	} {
		if got := belowEmptyMS(r, status(c.resetMS), c.n); got != c.want {
			t.Errorf("reset %d ms, %d tokens: %d ms, want %d", c.resetMS, c.n, got, c.want)
		}
	}
	if got := belowEmptyMS(&compiledRule{fleet: &ruleFleet{}}, status(65_000), 1); got != 0 {
		t.Errorf("a rule without a rate: %d ms", got)
	}
}
