package redisgcra

import (
	"math"
	"strings"
	"testing"
)

func TestLimitConversionsRoundAgainstTheCaller(t *testing.T) {
	cases := []struct {
		l              Limit
		n              uint64
		cost, credit   int64
		tau            int64
		remainingAtTau uint64 // Remaining(0): a full bucket
	}{
		{Limit{Rate: 10, Burst: 20}, 1, 100_000, 100_000, 2_000_000, 20},
		{Limit{Rate: 3, Burst: 3}, 1, 333_334, 333_333, 1_000_000, 3},
		{Limit{Rate: 3, Burst: 3}, 3, 1_000_000, 1_000_000, 1_000_000, 3},
		{Limit{Rate: 0.5, Burst: 1}, 1, 2_000_000, 2_000_000, 2_000_000, 1},
		{Limit{Rate: 3e6, Burst: 3e6}, 1, 1, 0, 1_000_000, 3_000_000},
		{Limit{Rate: 1e-9, Burst: 1e12}, 1, 1e15, 1e15, MaxMicros, 4}, // tau clamped: 2^52 us hold ~4.5 tokens at 1e-9/s
	}
	for _, c := range cases {
		if got := c.l.Cost(c.n); got != c.cost {
			t.Errorf("%+v Cost(%d) = %d, want %d", c.l, c.n, got, c.cost)
		}
		if got := c.l.Credit(c.n); got != c.credit {
			t.Errorf("%+v Credit(%d) = %d, want %d", c.l, c.n, got, c.credit)
		}
		if got := c.l.Tau(); got != c.tau {
			t.Errorf("%+v Tau() = %d, want %d", c.l, got, c.tau)
		}
		if got := c.l.Remaining(0); got != c.remainingAtTau {
			t.Errorf("%+v Remaining(0) = %d, want %d", c.l, got, c.remainingAtTau)
		}
	}
}

func TestCostNeverBelowTheExactCostAndClamped(t *testing.T) {
	for _, rate := range []float64{0.001, 0.3, 1, 3, 7, 10, 33.3, 1000, 12345.678, 1e6, 3e6} {
		l := Limit{Rate: rate, Burst: rate}
		for _, n := range []uint64{0, 1, 2, 3, 7, 100, 1 << 20} {
			c := l.Cost(n)
			if c < MaxMicros && float64(c)*rate < float64(n)*1e6 {
				t.Errorf("rate %g: Cost(%d) = %d us refills only %g tokens", rate, n, c, float64(c)*rate/1e6)
			}
			if cr := l.Credit(n); cr > c {
				t.Errorf("rate %g: Credit(%d) = %d > Cost %d", rate, n, cr, c)
			}
		}
	}
	l := Limit{Rate: 1, Burst: 1}
	if got := l.Cost(math.MaxUint64); got != MaxMicros {
		t.Errorf("Cost(MaxUint64) = %d, want MaxMicros", got)
	}
	if got := l.Remaining(l.Tau() + 5); got != 0 {
		t.Errorf("Remaining past tau = %d, want 0", got)
	}
}

func TestLimitValid(t *testing.T) {
	for _, l := range []Limit{{Rate: 0, Burst: 1}, {Rate: 1, Burst: 0}, {Rate: -1, Burst: 1}, {Rate: math.Inf(1), Burst: 1},
		{Rate: 1, Burst: math.NaN()}, {Rate: math.NaN(), Burst: 1}} {
		if l.Valid() {
			t.Errorf("%+v is valid", l)
		}
	}
	if !(Limit{Rate: 0.1, Burst: 1}).Valid() {
		t.Error("0.1/s burst 1 is not valid")
	}
}

func TestKeyIsInjectiveAndTagged(t *testing.T) {
	seen := map[string][3]string{}
	parts := []string{"", "a", "a:b", "b", ":", "1.a", "}", "{x}"}
	for _, d := range parts {
		for _, r := range parts {
			for _, id := range parts {
				k := Key(d, r, id)
				if prev, ok := seen[k]; ok {
					t.Fatalf("Key%q and Key%q are both %q", prev, [3]string{d, r, id}, k)
				}
				seen[k] = [3]string{d, r, id}
			}
		}
	}
	if got := Key("sluice", "free", "ab12"); got != "sluice:{6.sluice:4.free:4.ab12}" {
		t.Errorf("Key = %q", got)
	}
}

// RulePrefix starts every key of its rule, and no key of another rule
// or domain, even one whose name starts with the rule's.
func TestRulePrefixStartsTheRulesKeysAndNoOthers(t *testing.T) {
	parts := []string{"", "a", "a:b", "g", "g2", "g_2", ":", "1.a", "}", "{x}", "2.g2"}
	for _, d := range parts {
		for _, r := range parts {
			prefix := RulePrefix(d, r)
			for _, d2 := range parts {
				for _, r2 := range parts {
					for _, id := range parts {
						own := d2 == d && r2 == r
						for _, k := range []string{Key(d2, r2, id), WindowKey(d2, r2, id, 1700000000000), RollingKey(d2, r2, id)} {
							if strings.HasPrefix(k, prefix) != own {
								t.Fatalf("RulePrefix(%q, %q) = %q; key %q of (%q, %q): starts with it %v", d, r, prefix, k, d2, r2, !own)
							}
						}
					}
				}
			}
		}
	}
	if got := RulePrefix("sluice", "g"); got != "sluice:{6.sluice:1.g:" {
		t.Errorf("RulePrefix = %q", got)
	}
}

func TestEscapeGlobMakesAPatternMatchItselfOnly(t *testing.T) {
	for in, want := range map[string]string{"sluice": "sluice", `a*b?c[d]e\f`: `a\*b\?c\[d\]e\\f`, "^-{}": "^-{}"} {
		if got := escapeGlob(in); got != want {
			t.Errorf("escapeGlob(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzLimitConversions(f *testing.F) {
	f.Add(10.0, 20.0, uint64(1), int64(0))
	f.Add(1e-12, 1e12, uint64(math.MaxUint64), int64(-5))
	f.Add(3e6, 1.0, uint64(7), int64(MaxMicros))
	f.Fuzz(func(t *testing.T, rate, burst float64, n uint64, backlog int64) {
		l := Limit{Rate: rate, Burst: burst}
		if !l.Valid() {
			return
		}
		for _, us := range []int64{l.Tau(), l.Cost(n), l.Credit(n)} {
			if us < 0 || us > MaxMicros {
				t.Fatalf("%+v n=%d: %d us out of [0, MaxMicros]", l, n, us)
			}
		}
		_ = l.Remaining(backlog)
	})
}
