package policy

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/bodyscan"
)

// checkInvariants asserts what every Config returned by Parse guarantees.
func checkInvariants(t *testing.T, c *Config) {
	t.Helper()
	validMode := func(m Mode) bool { return m == ModeEnforce || m == ModeShadow }
	if !validMode(c.Mode) {
		t.Errorf("config mode %q", c.Mode)
	}
	if c.RejectStatus < 400 || c.RejectStatus > 599 {
		t.Errorf("reject status %d", c.RejectStatus)
	}
	if checkHeaderName(c.ShadowHeader) != "" || c.ShadowHeader != strings.ToLower(c.ShadowHeader) {
		t.Errorf("shadow header %q", c.ShadowHeader)
	}
	if c.TrustedHops < 0 || c.TrustedHops > MaxTrustedHops {
		t.Errorf("trusted hops %d", c.TrustedHops)
	}
	if len(c.Policies) == 0 {
		t.Error("no policies")
	}
	policies, rules := map[string]bool{}, map[string]bool{}
	for _, p := range c.Policies {
		if !ValidName(p.Name) || policies[p.Name] {
			t.Errorf("policy name %q invalid or duplicate", p.Name)
		}
		policies[p.Name] = true
		if len(p.Rules) == 0 {
			t.Errorf("policy %q has no rules", p.Name)
		}
		for _, r := range p.Rules {
			if !ValidName(r.Name) || rules[r.Name] {
				t.Errorf("rule name %q invalid or duplicate", r.Name)
			}
			rules[r.Name] = true
			if r.Policy != p.Name {
				t.Errorf("rule %q: Policy %q, owned by %q", r.Name, r.Policy, p.Name)
			}
			if !validMode(r.Mode) {
				t.Errorf("rule %q mode %q", r.Name, r.Mode)
			}
			if r.MaxKeys < 0 || r.MaxKeys > MaxMaxKeys {
				t.Errorf("rule %q max_keys %d", r.Name, r.MaxKeys)
			}
			if len(r.Keys) == 0 && r.Action == ActionLimit {
				t.Errorf("limit rule %q has no keys", r.Name)
			}
			for _, k := range r.Keys {
				if k2, ok := ParseSource(k.String()); !ok || k2 != k {
					t.Errorf("rule %q key %+v does not round-trip (%+v, %v)", r.Name, k, k2, ok)
				}
			}
			if !slices.IsSortedFunc(r.Match, func(a, b Matcher) int { return strings.Compare(a.Source.String(), b.Source.String()) }) {
				t.Errorf("rule %q match not sorted: %+v", r.Name, r.Match)
			}
			for _, m := range r.Match {
				if (m.Cond.Op <= MatchSuffix && m.Cond.Value == "") || (m.PathPrefix && m.Source.Kind != SourcePath) || m.Source.String() == "invalid" {
					t.Errorf("rule %q bad matcher %+v", r.Name, m)
				}
			}
			if r.Action != ActionLimit {
				if r.Algorithm != "" || r.TokenBucket != nil || r.Window != nil || len(r.Overrides) > 0 {
					t.Errorf("rule %q: an %s rule with an algorithm", r.Name, r.Action)
				}
				continue
			}
			if isWindowAlgorithm(r.Algorithm) {
				checkWindowInvariants(t, &r)
				continue
			}
			if r.Algorithm == AlgorithmQuota {
				checkQuotaInvariants(t, &r)
				continue
			}
			if r.Algorithm != AlgorithmTokenBucket || r.TokenBucket == nil {
				t.Errorf("rule %q algorithm %q bucket %v", r.Name, r.Algorithm, r.TokenBucket)
				continue
			}
			tb := r.TokenBucket
			if !finitePos(tb.TokensPerSecond) || !finitePos(tb.Burst) || tb.Burst < tb.TokensPerSecond || tb.Burst > MaxBurst {
				t.Errorf("rule %q rate/burst %v/%v", r.Name, tb.TokensPerSecond, tb.Burst)
			}
			for _, cost := range []float64{tb.FixedCost, tb.DefaultCost} {
				if !finitePos(cost) || cost > MaxCost || cost > tb.Burst {
					t.Errorf("rule %q cost %v", r.Name, cost)
				}
			}
			if !tb.Cost.FromResponse() && tb.MaxDebt != 0 || tb.MaxDebt < 0 || tb.MaxDebt > MaxBurst ||
				tb.Cost.FromResponse() && tb.MaxDelayMS > 0 {
				t.Errorf("rule %q response cost %v with max_debt %v, max_delay_ms %d, global %v", r.Name, tb.Cost, tb.MaxDebt, tb.MaxDelayMS, r.Global)
			}
			switch tb.Cost.Kind {
			case CostFixed:
				if tb.Cost.Name != "" {
					t.Errorf("rule %q fixed cost with name %q", r.Name, tb.Cost.Name)
				}
			case CostHeader, CostQuery, CostResponseHeader, CostResponseTrailer:
				if tb.Cost.Name == "" {
					t.Errorf("rule %q cost source without name", r.Name)
				}
			case CostResponseStatus:
				if tb.Cost.Statuses == (StatusSet{}) || tb.Cost.Name != "" {
					t.Errorf("rule %q counts no status, or has a name %q", r.Name, tb.Cost.Name)
				}
			case CostResponseGRPCStatus:
				if tb.Cost.GRPCCodes == 0 || tb.Cost.Name != "" {
					t.Errorf("rule %q counts no gRPC status, or has a name %q", r.Name, tb.Cost.Name)
				}
			case CostMetadata:
				if msg := checkMetadataName(tb.Cost.Name); msg != "" {
					t.Errorf("rule %q costs the metadata at %q: %s", r.Name, tb.Cost.Name, msg)
				}
			case CostResponseJSON:
				if _, msg := bodyscan.ParsePaths(tb.Cost.Name); msg != "" {
					t.Errorf("rule %q reads the body at %q: %s", r.Name, tb.Cost.Name, msg)
				}
			default:
				t.Errorf("rule %q cost kind %d", r.Name, tb.Cost.Kind)
			}
		}
	}
	// The normalized form is deterministic and parses back to the same Config.
	b1, err := c.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	b2, _ := c.MarshalJSON()
	if string(b1) != string(b2) {
		t.Errorf("MarshalJSON not deterministic:\n%s\n%s", b1, b2)
	}
	c2, err := Parse(b1)
	if err != nil {
		t.Fatalf("normalized form does not parse: %v\n%s", err, b1)
	}
	if !reflect.DeepEqual(c, c2) {
		t.Errorf("normalized form does not round-trip:\n%+v\n%+v\n%s", c, c2, b1)
	}
}

// checkWindowInvariants: a windowed rule's config is in range and
// consistent (window.go).
func checkWindowInvariants(t *testing.T, r *Rule) {
	t.Helper()
	w := r.Window
	switch {
	case w == nil || r.TokenBucket != nil:
		t.Errorf("rule %q: %s with window %v, bucket %v", r.Name, r.Algorithm, w, r.TokenBucket)
	case !finitePos(w.Limit) || w.Limit > MaxBurst:
		t.Errorf("rule %q limit %v", r.Name, w.Limit)
	case w.WindowSeconds < 1 || w.WindowSeconds > MaxWindowSeconds || w.PeriodSeconds < 1 ||
		w.WindowSeconds%w.PeriodSeconds != 0 || w.Periods() > MaxPeriods:
		t.Errorf("rule %q window %d period %d", r.Name, w.WindowSeconds, w.PeriodSeconds)
	case r.Algorithm != AlgorithmRollingWindow && (w.PeriodSeconds != w.WindowSeconds || w.MaxPerPeriod != 0):
		t.Errorf("rule %q: %s with a period or cap", r.Name, r.Algorithm)
	case w.MaxPerPeriod < 0 || w.MaxPerPeriod > w.Limit:
		t.Errorf("rule %q max_per_period %v", r.Name, w.MaxPerPeriod)
	}
	if w == nil {
		return
	}
	for _, cost := range []float64{w.FixedCost, w.DefaultCost} {
		if !finitePos(cost) || cost > MaxCost || cost > w.Limit || (w.MaxPerPeriod > 0 && cost > w.MaxPerPeriod) {
			t.Errorf("rule %q cost %v", r.Name, cost)
		}
	}
}
func finitePos(x float64) bool { return x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }

// checkQuotaInvariants: a quota's config is in range (quota.go).
func checkQuotaInvariants(t *testing.T, r *Rule) {
	t.Helper()
	q := r.Quota
	switch {
	case q == nil || r.TokenBucket != nil || r.Window != nil:
		t.Errorf("rule %q: quota %v, bucket %v, window %v", r.Name, q, r.TokenBucket, r.Window)
	case !finitePos(q.Limit) || q.Limit > MaxBurst:
		t.Errorf("rule %q limit %v", r.Name, q.Limit)
	case !isQuotaPeriod(q.Period) || q.Location == nil || q.Location.String() != q.TimeZone:
		t.Errorf("rule %q period %q zone %q (%v)", r.Name, q.Period, q.TimeZone, q.Location)
	case !finitePos(q.FixedCost) || q.FixedCost > q.Limit || !finitePos(q.DefaultCost) || q.DefaultCost > q.Limit:
		t.Errorf("rule %q costs %v %v", r.Name, q.FixedCost, q.DefaultCost)
	case q.MaxDebt < 0 || q.MaxDebt > MaxBurst || !q.Cost.FromResponse() && q.MaxDebt != 0:
		t.Errorf("rule %q max_debt %v with cost %v", r.Name, q.MaxDebt, q.Cost)
	case r.Global && q.Limit < 1:
		t.Errorf("rule %q: a global quota with limit %v", r.Name, q.Limit)
	}
}
