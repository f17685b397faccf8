package filter_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

func bearer(payload string) string {
	return "Bearer eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
}

// The Fairvisor token bucket's "Per-API-key tiered limits", verbatim.
const fairvisorTiered = `{
  "rules": [
    {
      "name": "enterprise",
      "limit_keys": ["header:x-api-key"],
      "algorithm": "token_bucket",
      "algorithm_config": { "rps": 1000, "burst": 2000 },
      "match": { "jwt:plan": "enterprise" }
    },
    {
      "name": "free",
      "limit_keys": ["header:x-api-key"],
      "algorithm": "token_bucket",
      "algorithm_config": { "rps": 10, "burst": 20 }
    }
  ]
}`

func TestTieredLimitsByJWTPlan(t *testing.T) {
	f := start(t, fairvisorTiered, 1)
	ent := bearer(`{"sub":"acme","plan":"enterprise"}`)

	// An enterprise key is limited by the enterprise rule only: far more
	// than the free burst of 20 passes.
	if got := f.admitted(100, "x-api-key", "ent-key", "authorization", ent); got != 100 {
		t.Fatalf("enterprise: %d of 100 admitted, want 100", got)
	}
	if tok := f.tokens("enterprise", "ent-key"); !near(tok, 1900) {
		t.Errorf("enterprise bucket = %v tokens, want 1900", tok)
	}
	if _, ok := f.bucket("free", "ent-key"); ok {
		t.Error("the free rule created a bucket for an enterprise request")
	}

	// A key without the enterprise claim gets the free rule: 20, then 429.
	if got := f.admitted(25, "x-api-key", "free-key"); got != 20 {
		t.Fatalf("free: %d of 25 admitted, want 20", got)
	}
	// A token with another plan is free too (and shares the key's bucket).
	res := f.do("x-api-key", "free-key", "authorization", bearer(`{"plan":"free"}`))
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("free plan after the burst: rejected=%v status=%d", res.Rejected, res.Status)
	}
	for name, want := range map[string]uint64{
		"sluice.rule.enterprise.allowed":  100,
		"sluice.rule.enterprise.rejected": 0,
		"sluice.rule.free.allowed":        20,
		"sluice.rule.free.rejected":       6,
	} {
		if got := f.metric(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}

// The configuration reference's example: two policies, both apply.
const configurationExample = `{
  "mode": "enforce",
  "policies": [
    {"name": "tiers", "rules": [
      {"name": "enterprise", "limit_keys": ["header:x-api-key"],
       "match": {"jwt:plan": "enterprise"},
       "algorithm": "token_bucket", "algorithm_config": {"rps": 1000, "burst": 2000}},
      {"name": "free", "limit_keys": ["header:x-api-key"],
       "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 10, "burst": 20,
                            "cost_source": "header:x-request-weight", "default_cost": 1}}
    ]},
    {"name": "per-ip", "rules": [
      {"name": "global-rps", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
       "algorithm_config": {"rps": 5, "burst": 10}}
    ]}
  ]
}`

func TestEveryPolicyApplies(t *testing.T) {
	f := start(t, configurationExample, 1)
	ent := bearer(`{"plan":"enterprise"}`)
	// The per-ip policy applies to enterprise requests too.
	if got := f.admitted(15, "x-api-key", "e1", "authorization", ent, "@ip", "192.0.2.1:1000"); got != 10 {
		t.Fatalf("%d admitted from one IP, want 10 (global-rps burst)", got)
	}
	// Rejections by global-rps consumed nothing from enterprise.
	if tok := f.tokens("enterprise", "e1"); !near(tok, 1990) {
		t.Errorf("enterprise tokens = %v, want 1990", tok)
	}
	// Another IP has its own bucket.
	if got := f.admitted(3, "x-api-key", "e1", "authorization", ent, "@ip", "192.0.2.2:1000"); got != 3 {
		t.Fatalf("second IP: %d of 3 admitted", got)
	}
	// The port is not part of the key.
	if got := f.admitted(1, "x-api-key", "e1", "authorization", ent, "@ip", "192.0.2.1:2000"); got != 0 {
		t.Fatal("a new source port got a fresh bucket")
	}
}

// Stacked policies: a request rejected by one rule consumes nothing from the
// others (phase 1 decides before any write).
func TestStackingNoPartialConsumption(t *testing.T) {
	const cfg = `{"policies": [
	  {"name": "users", "rules": [{"name": "per-user", "limit_keys": ["header:x-user"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 5}}]},
	  {"name": "ips", "rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.0005, "burst": 3}}]}
	]}`
	f := start(t, cfg, 1)
	if got := f.admitted(6, "x-user", "u1", "@ip", "10.1.1.1:1"); got != 3 {
		t.Fatalf("%d admitted, want 3 (per-ip burst)", got)
	}
	if tok := f.tokens("per-user", "u1"); !near(tok, 2) {
		t.Fatalf("per-user tokens = %v, want 2: rejected requests consumed from it", tok)
	}
	// Same user from a new IP: the user's 2 remaining tokens, then per-user rejects.
	if got := f.admitted(4, "x-user", "u1", "@ip", "10.1.1.2:1"); got != 2 {
		t.Fatalf("%d admitted, want 2", got)
	}
	if tok := f.tokens("per-ip", "10.1.1.2"); !near(tok, 1) {
		t.Fatalf("per-ip tokens = %v, want 1", tok)
	}
	// Both rules refuse: per-user needs 1000 s for a token, per-ip 2000 s;
	// Retry-After covers the longer wait (plus at most 50% jitter, so
	// per-user's wait alone could not exceed 1500).
	res := f.do("x-user", "u1", "@ip", "10.1.1.1:1")
	if !res.Rejected {
		t.Fatal("not rejected")
	}
	if ra := mustAtoi(t, mustHeader(t, res.Local.Headers, "retry-after")); ra < 2000 || ra > 3000 {
		t.Fatalf("Retry-After %d, want per-ip's 2000 s wait plus at most 50%% jitter", ra)
	}
}

// Stacked policies under contention: 4 VMs race on one user and one IP. The
// per-ip rule admits exactly its burst, and the per-user bucket loses exactly
// that much, whatever phase-2 re-decisions and refunds happened.
func TestStackingRaceRefunds(t *testing.T) {
	const cfg = `{"policies": [
	  {"name": "users", "rules": [{"name": "per-user", "limit_keys": ["header:x-user"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 50}}]},
	  {"name": "ips", "rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 30}}]}
	]}`
	f := start(t, cfg, 4)
	trials := 30
	if testing.Short() {
		trials = 5
	}
	for trial := 0; trial < trials; trial++ {
		user := fmt.Sprintf("user-%d", trial)
		ip := fmt.Sprintf("10.2.%d.%d", trial/256, trial%256)
		allowed := race(t, f, 4, 50, rq("x-user", user, "@ip", ip+":9"))
		if allowed != 30 {
			t.Fatalf("trial %d: %d admitted, want 30", trial, allowed)
		}
		if tok := f.tokens("per-user", user); !near(tok, 20) {
			t.Fatalf("trial %d: per-user tokens = %v, want 20 (partial consumption)", trial, tok)
		}
	}
	if n := f.metric("sluice.rule.per-user.fail_open") + f.metric("sluice.rule.per-ip.fail_open"); n != 0 {
		t.Errorf("fail_open = %d", n)
	}
	if n := f.metric("sluice.refund_failed"); n != 0 {
		t.Errorf("refund_failed = %d", n)
	}
}

// race sends perVM copies of r on each of vms VMs concurrently and returns
// the number admitted.
func race(t testing.TB, f *fixture, vms, perVM int, r *wasmhost.Request) int {
	t.Helper()
	type out struct {
		ok  int
		err error
	}
	ch := make(chan out, vms)
	for v := 0; v < vms; v++ {
		go func(vm *wasmhost.VM) {
			n := 0
			for i := 0; i < perVM; i++ {
				res, err := vm.HTTP(context.Background(), r)
				if err != nil {
					ch <- out{err: err}
					return
				}
				if !res.Rejected {
					n++
				}
			}
			ch <- out{ok: n}
		}(f.h.VM(v))
	}
	total := 0
	for v := 0; v < vms; v++ {
		o := <-ch
		if o.err != nil {
			t.Fatalf("HTTP: %v", o.err)
		}
		total += o.ok
	}
	return total
}

// The hot-key race: 4 VMs on 4 goroutines, a fresh key, burst 100 and a
// tiny rate, 1000 requests: exactly 100 admitted, 200 times. Creation races
// on the fresh key are what the sentinel-cas create protects against. It
// runs in every storage mode: bounded with the default max_keys
// (each fresh key creates its slot), exact keys (max_keys 0), and bounded
// with max_keys 2, where the first two trials' keys take the group's two
// ways and every later trial's key finds them active and is decided by the
// group's overflow bucket, raced by 4 VMs: the later trials together are
// admitted exactly one burst (they share one limit), the first of them
// all of it.
func TestRaceExactBurst(t *testing.T) {
	for _, mode := range []struct {
		name    string
		maxKeys string
	}{{"bounded", ""}, {"exact", `"max_keys": 0, `}, {"overflowing", `"max_keys": 2, `}} {
		for _, c := range []struct {
			name   string
			faults wasmhost.Faults
		}{
			{"plain", wasmhost.Faults{}},
			{"injected-cas-mismatch", wasmhost.Faults{CASMismatchRate: 0.3, Seed: 7}},
		} {
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				cfg := `{"rules": [{"name": "race", ` + mode.maxKeys + `"limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
				  "algorithm_config": {"rps": 0.0001, "burst": 100}}]}`
				f := start(t, cfg, 4)
				f.h.SharedData().InjectFaults(c.faults)
				trials := 200
				if testing.Short() {
					trials = 20
				}
				overflowing := 0 // admitted in the trials decided by the overflow bucket
				for trial := 0; trial < trials; trial++ {
					key := fmt.Sprintf("%s-%d", c.name, trial)
					got := race(t, f, 4, 250, rq("x-api-key", key))
					want := 100
					if mode.name == "overflowing" && trial >= 2 {
						overflowing += got
						if trial > 2 {
							want = 0 // the overflow bucket is empty
						}
					}
					if got != want {
						t.Fatalf("trial %d: %d of 1000 admitted, want exactly %d (fail_open=%d)",
							trial, got, want, f.metric("sluice.rule.race.fail_open"))
					}
				}
				if mode.name == "overflowing" && overflowing != 100 {
					t.Errorf("overflowing identities admitted %d together, want one burst, 100", overflowing)
				}
				if n := f.metric("sluice.rule.race.fail_open"); n != 0 {
					t.Errorf("fail_open = %d", n)
				}
				if c.faults.CASMismatchRate > 0 && f.metric("sluice.rule.race.cas_retries") == 0 {
					t.Error("no CAS retries counted despite injected mismatches")
				}
				overflowed := f.metric("sluice.rule.race.overflowed")
				if mode.name == "overflowing" && overflowed != uint64(trials-2)*1000 {
					t.Errorf("overflowed = %d over %d trials, want every request of the trials after the first two", overflowed, trials)
				}
				if mode.name != "overflowing" && overflowed != 0 {
					t.Errorf("overflowed = %d", overflowed)
				}
				keys := 0
				for _, k := range f.h.SharedData().Keys() {
					if strings.HasPrefix(k, "tb:race:") {
						keys++
					}
				}
				switch mode.name {
				case "exact":
					if keys != trials {
						t.Errorf("%d exact keys for %d identities", keys, trials)
					}
				case "overflowing":
					if keys > 2 {
						t.Errorf("%d keys with max_keys 2", keys)
					}
				}
				t.Logf("cas_retries=%d overflowed=%d keys=%d", f.metric("sluice.rule.race.cas_retries"), overflowed, keys)
			})
		}
	}
}

func TestHeaderCostAndDefaultCost(t *testing.T) {
	const cfg = `{"rules": [
	  {"name": "weighted", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 10, "burst": 20, "cost_source": "header:x-request-weight", "default_cost": 2}},
	  {"name": "q", "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 10, "cost_source": "query:cost"}},
	  {"name": "fixed", "limit_keys": ["header:x-other"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 10, "fixed_cost": 4}}
	]}`
	f := start(t, cfg, 1)
	steps := []struct {
		weight string // "" = header absent
		want   float64
	}{
		{"5", 15}, {"", 13}, {"abc", 11}, {"-3", 9}, {"NaN", 7}, {"inf", 5}, {"1e12", 3}, {"0", 1}, {"0.5", 0.5},
	}
	for _, s := range steps {
		kv := []string{"x-api-key", "k"}
		if s.weight != "" {
			kv = append(kv, "x-request-weight", s.weight)
		}
		if res := f.do(kv...); res.Rejected {
			t.Fatalf("weight %q rejected", s.weight)
		}
		if tok := f.tokens("weighted", "k"); !near(tok, s.want) {
			t.Fatalf("after weight %q: %v tokens, want %v", s.weight, tok, s.want)
		}
	}
	// 0.5 tokens left: a cost-1 request is refused, Retry-After = ceil(0.5/10) = 1.
	res := f.do("x-api-key", "k", "x-request-weight", "1")
	if !res.Rejected {
		t.Fatal("cost above the remaining tokens admitted")
	}
	if ra := mustHeader(t, res.Local.Headers, "retry-after"); ra != "1" {
		t.Fatalf("Retry-After %s, want 1 (0.5 tokens missing at 10 per second, rounded up)", ra)
	}
	// Query cost (percent-decoded) and default cost 1.
	f.do("x-tenant", "t", ":path", "/x?cost=%33")
	if tok := f.tokens("q", "t"); !near(tok, 7) {
		t.Fatalf("query cost: %v tokens, want 7", tok)
	}
	f.do("x-tenant", "t", ":path", "/x?other=1")
	if tok := f.tokens("q", "t"); !near(tok, 6) {
		t.Fatalf("default cost: %v tokens, want 6", tok)
	}
	// A cost larger than the burst can never pass, and consumes nothing.
	if res := f.do("x-tenant", "t", ":path", "/x?cost=11"); !res.Rejected {
		t.Fatal("cost > burst admitted")
	}
	f.do("x-other", "o")
	if tok := f.tokens("fixed", "o"); !near(tok, 6) {
		t.Fatalf("fixed cost: %v tokens, want 6", tok)
	}
}

func TestShadowMode(t *testing.T) {
	const cfg = `{"mode": "shadow", "policies": [
	  {"name": "a", "rules": [{"name": "shadowed", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 2}}]},
	  {"name": "b", "rules": [{"name": "enforced", "mode": "enforce", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 4}}]}
	]}`
	f := start(t, cfg, 1)
	var upstream [][]wasmhost.Header
	for i := 0; i < 4; i++ {
		// A client-sent shadow header never reaches upstream as sent.
		res := f.do("x-api-key", "k", "x-sluice-shadow", "forged")
		if res.Rejected {
			t.Fatalf("request %d rejected; only the enforce rule (burst 4) may reject", i)
		}
		upstream = append(upstream, res.UpstreamHeaders)
	}
	for i, hs := range upstream {
		v, ok := header(hs, "x-sluice-shadow")
		switch {
		case i < 2 && ok:
			t.Errorf("request %d: shadow header %q on an admitted request", i, v)
		case i >= 2 && (v != "shadowed" || headerCount(hs, "x-sluice-shadow") != 1):
			t.Errorf("request %d: shadow header = %q (%d), want \"shadowed\"", i, v, headerCount(hs, "x-sluice-shadow"))
		}
	}
	// The shadow rule consumed like an enforce rule would (its counts are
	// truthful) and never more than its burst.
	if tok := f.tokens("shadowed", "k"); !near(tok, 0) {
		t.Errorf("shadowed tokens = %v, want 0", tok)
	}
	if got := f.metric("sluice.rule.shadowed.shadow_rejected"); got != 2 {
		t.Errorf("shadow_rejected = %d, want 2", got)
	}
	if got := f.metric("sluice.rule.shadowed.allowed"); got != 2 {
		t.Errorf("shadowed allowed = %d, want 2", got)
	}
	if logsContaining(f.h, wasmhost.LogLevelInfo, "shadow rule shadowed would have rejected") == 0 {
		t.Error("shadow rejection not logged")
	}
	// The enforce rule (rule mode wins over config mode) rejects the 5th,
	// and that rejected request consumes nothing from the shadow rule.
	res := f.do("x-api-key", "k")
	if !res.Rejected {
		t.Fatal("enforce rule in a shadow config did not reject")
	}
	if got := f.metric("sluice.rule.shadowed.shadow_rejected"); got != 3 {
		t.Errorf("shadow_rejected = %d, want 3", got)
	}
	// Response headers come from enforce rules only.
	f2 := start(t, `{"mode": "shadow", "rules": [{"name": "s", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`, 1)
	for i := 0; i < 3; i++ {
		res := f2.do("x-api-key", "k")
		if res.Rejected {
			t.Fatal("shadow config rejected a request")
		}
		if _, ok := header(res.ResponseHeaders, "ratelimit-limit"); ok {
			t.Fatal("shadow rule produced RateLimit headers")
		}
	}
}

// Every kind of invalid configuration is refused by on_configure, and every
// problem is logged at error level with its JSON path.
func TestInvalidConfigs(t *testing.T) {
	rule := func(name, extra, algo string) string {
		return `{"name": "` + name + `", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": ` + algo + extra + `}`
	}
	cases := map[string]string{
		"malformed json":     `{"rules": [`,
		"not an object":      `[1,2]`,
		"empty":              ``,
		"unknown top field":  `{"rules": [` + rule("a", "", `{"rps": 1, "burst": 1}`) + `], "bogus": true}`,
		"unknown rule field": `{"rules": [` + rule("a", `, "limits": 3`, `{"rps": 1, "burst": 1}`) + `]}`,
		"unknown algo field": `{"rules": [` + rule("a", "", `{"rps": 1, "burst": 1, "burts": 2}`) + `]}`,
		"unknown algorithm":  `{"rules": [{"name": "a", "limit_keys": ["ip:address"], "algorithm": "leaky", "algorithm_config": {}}]}`,
		"zero rate":          `{"rules": [` + rule("a", "", `{"rps": 0, "burst": 1}`) + `]}`,
		"negative rate":      `{"rules": [` + rule("a", "", `{"tokens_per_second": -5, "burst": 1}`) + `]}`,
		"burst below rate":   `{"rules": [` + rule("a", "", `{"rps": 10, "burst": 5}`) + `]}`,
		"both rate fields":   `{"rules": [` + rule("a", "", `{"rps": 1, "tokens_per_second": 1, "burst": 1}`) + `]}`,
		"bad cost source":    `{"rules": [` + rule("a", "", `{"rps": 1, "burst": 1, "cost_source": "cookie:x"}`) + `]}`,
		"bad default cost":   `{"rules": [` + rule("a", "", `{"rps": 1, "burst": 1, "default_cost": 0}`) + `]}`,
		"duplicate rules":    `{"policies": [{"name": "p", "rules": [` + rule("a", "", `{"rps": 1, "burst": 1}`) + `]}, {"name": "q", "rules": [` + rule("a", "", `{"rps": 1, "burst": 1}`) + `]}]}`,
		"bad key source":     `{"rules": [{"name": "a", "limit_keys": ["form:session"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
		"empty limit keys":   `{"rules": [{"name": "a", "limit_keys": [], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
		"bad mode":           `{"mode": "dry-run", "rules": [` + rule("a", "", `{"rps": 1, "burst": 1}`) + `]}`,
		"bad rule name":      `{"rules": [` + rule("a b:c", "", `{"rps": 1, "burst": 1}`) + `]}`,
		"no rules":           `{"rules": []}`,
		"bad reject status":  `{"reject_status": 200, "rules": [` + rule("a", "", `{"rps": 1, "burst": 1}`) + `]}`,
		"bad match source":   `{"rules": [` + rule("a", `, "match": {"form:x": "1"}`, `{"rps": 1, "burst": 1}`) + `]}`,
		"many problems":      `{"bogus": 1, "rules": [` + rule("a", `, "extra": 1`, `{"rps": 0, "burst": -1}`) + `, ` + rule("a", "", `{"rps": 10, "burst": 5}`) + `]}`,
	}
	good := `{"rules": [{"name": "keep", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 0.001, "burst": 3}}]}`
	f := start(t, good, 2)
	f.admitted(2, "x-api-key", "k") // 1 token left in the old config's bucket
	before := f.metric("sluice.config_rejected")
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			_, perr := policy.Parse([]byte(cfg))
			fes, ok := perr.(policy.Errors)
			if !ok || len(fes) == 0 {
				t.Fatalf("test bug: policy.Parse accepted the config (%v)", perr)
			}
			nlogs := len(f.h.LogsAtLeast(wasmhost.LogLevelError))
			if err := f.h.Reconfigure(context.Background(), []byte(cfg)); err == nil {
				t.Fatal("Reconfigure accepted an invalid configuration")
			}
			logs := f.h.LogsAtLeast(wasmhost.LogLevelError)[nlogs:]
			for _, fe := range fes {
				found := false
				for _, l := range logs {
					if strings.Contains(l.Message, fe.Error()) {
						found = true
					}
				}
				if !found {
					t.Errorf("problem %q not logged; logs: %v", fe.Error(), logs)
				}
			}
			// Also at first start: the VM refuses and the host reports it.
			if _, err := tryStart(t, cfg, 1); err == nil {
				t.Error("wasmhost.New accepted an invalid configuration")
			}
		})
	}
	// Paths are part of what is logged.
	if logsContaining(f.h, wasmhost.LogLevelError, "rules[0].algorithm_config.burst") == 0 {
		t.Error("no log line names rules[0].algorithm_config.burst")
	}
	if got := f.metric("sluice.config_rejected") - before; got < uint64(len(cases)) {
		t.Errorf("config_rejected grew by %d, want >= %d", got, len(cases))
	}
	// The old configuration is still in force, with its bucket.
	if got := f.admitted(3, "x-api-key", "k"); got != 1 {
		t.Fatalf("after rejected updates %d admitted, want 1", got)
	}
}

func TestReconfigureKeepsBuckets(t *testing.T) {
	cfg := func(burst int, extra string) string {
		return fmt.Sprintf(`{"rules": [{"name": "keep", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
		  "algorithm_config": {"rps": 0.001, "burst": %d}}%s]}`, burst, extra)
	}
	f := start(t, cfg(5, ""), 2)
	if got := f.admitted(3, "x-api-key", "k"); got != 3 {
		t.Fatalf("%d admitted", got)
	}
	// A new configuration (an extra rule, a bigger burst) keeps the bucket.
	extra := `, {"name": "other", "limit_keys": ["header:x-other"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}`
	if err := f.h.Reconfigure(context.Background(), []byte(cfg(50, extra))); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	if tok := f.tokens("keep", "k"); !near(tok, 2) {
		t.Fatalf("tokens after reconfigure = %v, want 2", tok)
	}
	// Both VMs see the same (kept) bucket; no refill at this rate.
	n := 0
	for i := 0; i < 4; i++ {
		if !f.doOn(i%2, rq("x-api-key", "k")).Rejected {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("after reconfigure %d admitted, want 2", n)
	}
	// A lower burst caps the stored tokens.
	f.clock.Advance(time.Hour) // +3.6 tokens at 0.001/s
	if err := f.h.Reconfigure(context.Background(), []byte(cfg(1, ""))); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	if got := f.admitted(3, "x-api-key", "k"); got != 1 {
		t.Fatalf("with burst 1: %d admitted, want 1", got)
	}
}

func TestBackwardsClock(t *testing.T) {
	const cfg = `{"rules": [{"name": "c", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 2}}]}`
	f := start(t, cfg, 1)
	if got := f.admitted(3, "x-api-key", "k"); got != 2 {
		t.Fatalf("%d admitted, want 2", got)
	}
	// The clock jumps back an hour: no tokens are minted.
	f.clock.Set(t0.Add(-time.Hour))
	if got := f.admitted(3, "x-api-key", "k"); got != 0 {
		t.Fatalf("backwards clock minted tokens: %d admitted", got)
	}
	// Still behind the bucket's last refill: nothing.
	f.clock.Set(t0.Add(-time.Second))
	if got := f.admitted(1, "x-api-key", "k"); got != 0 {
		t.Fatal("tokens minted while behind last_refill")
	}
	// Time passes again after the bucket's last refill: one token a second.
	f.clock.Set(t0.Add(1500 * time.Millisecond))
	if got := f.admitted(3, "x-api-key", "k"); got != 1 {
		t.Fatalf("%d admitted 1.5 s later, want 1", got)
	}
	b, _ := f.bucket("c", "k")
	if want := float64(t0.Add(1500*time.Millisecond).UnixNano()) / 1e9; !near(b.LastRefill, want) {
		t.Errorf("last_refill = %f, want %f", b.LastRefill, want)
	}
}

func TestSharedDataFailureFailsOpen(t *testing.T) {
	for _, maxKeys := range []string{"65536", "0", "1"} {
		t.Run("max_keys="+maxKeys, func(t *testing.T) { testFailsOpen(t, maxKeys) })
	}
}

func testFailsOpen(t *testing.T, maxKeys string) {
	cfg := `{"rules": [{"name": "f", "max_keys": ` + maxKeys + `, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 0.001, "burst": 1}}]}`
	for _, c := range []struct {
		name   string
		faults wasmhost.Faults
	}{
		{"get", wasmhost.Faults{GetFailRate: 1, GetFailStatus: wasmhost.StatusInternalFailure}},
		{"set", wasmhost.Faults{SetFailRate: 1, SetFailStatus: wasmhost.StatusInternalFailure}},
		{"both", wasmhost.Faults{GetFailRate: 1, GetFailStatus: wasmhost.StatusBadArgument, SetFailRate: 1, SetFailStatus: wasmhost.StatusInternalFailure}},
		{"always-mismatch", wasmhost.Faults{CASMismatchRate: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := start(t, cfg, 2)
			if c.name == "always-mismatch" {
				// A full existing bucket: injected mismatches hit CAS updates only.
				f.putBucket("f", "k", state.Bucket{Tokens: 1, LastRefill: float64(t0.Unix())})
			}
			f.h.SharedData().InjectFaults(c.faults)
			before := f.metric("sluice.rule.f.fail_open")
			for i := 0; i < 100; i++ {
				res := f.doOn(i%2, rq("x-api-key", "k"))
				if res.Rejected {
					t.Fatalf("request %d rejected during a shared-data failure", i)
				}
				if _, ok := header(res.ResponseHeaders, "ratelimit-remaining"); ok {
					t.Fatalf("request %d: RateLimit headers from a failed rule", i)
				}
			}
			if got := f.metric("sluice.rule.f.fail_open") - before; got != 100 {
				t.Errorf("fail_open = %d, want 100", got)
			}
			warns := logsContaining(f.h, wasmhost.LogLevelWarn, "failing open")
			if warns == 0 || warns > 10 {
				t.Errorf("%d fail-open warnings for 100 failures: want a few (rate-limited)", warns)
			}
			if got := f.metric("sluice.panics_recovered"); got != 0 {
				t.Errorf("panics_recovered = %d", got)
			}
			// Recovery: faults off, limiting resumes.
			f.h.SharedData().InjectFaults(wasmhost.Faults{})
			if got := f.admitted(3, "x-api-key", "fresh"); got != 1 {
				t.Errorf("after recovery %d admitted, want 1", got)
			}
		})
	}
}

func TestAllowedResponseHeaders(t *testing.T) {
	const cfg = `{"legacy_headers": true, "policies": [
	  {"name": "p1", "rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 10, "burst": 20}}]},
	  {"name": "p2", "rules": [{"name": "ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 1, "burst": 30}}]}
	]}`
	f := start(t, cfg, 1)
	want := func(res *wasmhost.Result, kv ...string) {
		t.Helper()
		if res.Rejected {
			t.Fatal("rejected")
		}
		for i := 0; i < len(kv); i += 2 {
			got, ok := header(res.ResponseHeaders, kv[i])
			if !ok || got != kv[i+1] {
				t.Errorf("%s = %q (present %v), want %q", kv[i], got, ok, kv[i+1])
			}
			if n := headerCount(res.ResponseHeaders, kv[i]); n != 1 {
				t.Errorf("%s appears %d times", kv[i], n)
			}
		}
	}
	// api: 19 left (most restrictive; ip has 29), full again in 0.1 s -> 1.
	want(f.do("x-api-key", "k"),
		"ratelimit-limit", "20", "ratelimit-remaining", "19", "ratelimit-reset", "1",
		"ratelimit", `"api";r=19;t=1`, "ratelimit-policy", `"api";q=20;w=2`, ":status", "200")
	for i := 0; i < 13; i++ {
		f.do("x-api-key", "k")
	}
	// 15th request: 5 left, 15 missing at 10/s -> 1.5 s -> 2 (ip has 15 left).
	want(f.do("x-api-key", "k"),
		"ratelimit-remaining", "5", "ratelimit-reset", "2", "ratelimit", `"api";r=5;t=2`)
	// Another key: now the ip rule (30-16=14 left) is more restrictive than api (19).
	want(f.do("x-api-key", "other"),
		"ratelimit-limit", "30", "ratelimit-remaining", "14", "ratelimit-reset", "16",
		"ratelimit", `"ip";r=14;t=16`, "ratelimit-policy", `"ip";q=30;w=30`)
	// An upstream that set its own field is not duplicated.
	r := rq("x-api-key", "k3", "@ip", "10.5.5.5:1")
	r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"ratelimit-limit", "999"}}
	want(f.doOn(0, r), "ratelimit-limit", "20")

	// response_headers: false turns them off.
	f2 := start(t, `{"response_headers": false, "rules": [{"name": "api", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 10, "burst": 20}}]}`, 1)
	res := f2.do("x-api-key", "k")
	for _, h := range []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit", "ratelimit-policy"} {
		if _, ok := header(res.ResponseHeaders, h); ok {
			t.Errorf("%s sent with response_headers false", h)
		}
	}
}

// Without "legacy_headers" (or with false) only the draft-10 fields are
// sent, on allowed and rejected responses alike.
func TestLegacyHeadersOffByDefault(t *testing.T) {
	for _, opt := range []string{``, `"legacy_headers": false, `} {
		t.Run("option="+opt, func(t *testing.T) { legacyHeadersOff(t, opt) })
	}
}

func legacyHeadersOff(t *testing.T, opt string) {
	f := start(t, `{`+opt+`"rules": [{"name": "api", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.1, "burst": 2}}]}`, 1)
	legacy := []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}
	check := func(res *wasmhost.Result, kv ...string) {
		t.Helper()
		for i := 0; i < len(kv); i += 2 {
			if got, ok := header(res.ResponseHeaders, kv[i]); !ok || got != kv[i+1] {
				t.Errorf("%s = %q (present %v), want %q", kv[i], got, ok, kv[i+1])
			}
		}
		for _, h := range legacy {
			if v, ok := header(res.ResponseHeaders, h); ok {
				t.Errorf("%s: %q sent with legacy_headers false", h, v)
			}
		}
	}
	check(f.do("x-api-key", "k"), "ratelimit", `"api";r=1;t=10`, "ratelimit-policy", `"api";q=2;w=20`)
	f.do("x-api-key", "k")
	res := f.do("x-api-key", "k")
	if !res.Rejected {
		t.Fatal("third request admitted")
	}
	check(res, "ratelimit", `"api";r=0;t=10`, "ratelimit-policy", `"api";q=2;w=20`,
		"x-ratelimit-reason", "token_bucket_exceeded", "content-type", "application/json")
	if _, ok := header(res.ResponseHeaders, "retry-after"); !ok {
		t.Error("retry-after missing")
	}
}

func TestRejectedResponse(t *testing.T) {
	const cfg = `{"legacy_headers": true, "reject_status": 503, "rules": [{"name": "slow", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 0.1, "burst": 2}}]}`
	f := start(t, cfg, 1)
	f.admitted(2, "x-api-key", "client-7")
	res := f.do("x-api-key", "client-7")
	if !res.Rejected || res.Local == nil || res.Status != 503 || res.Local.Status != 503 {
		t.Fatalf("rejected=%v status=%d local=%+v", res.Rejected, res.Status, res.Local)
	}
	if res.UpstreamHeaders != nil {
		t.Error("a rejected request reached upstream")
	}
	// 0 tokens, cost 1 at 0.1/s: the true wait is 10 s.
	retry := limiter.RetryAfter(10, "client-7")
	if retry < 10 || retry > 15 {
		t.Fatalf("test bug: RetryAfter = %d", retry)
	}
	wantHdr := map[string]string{
		"retry-after":         fmt.Sprint(retry),
		"ratelimit-limit":     "2",
		"ratelimit-remaining": "0",
		"ratelimit-reset":     "10",
		"ratelimit":           `"slow";r=0;t=10`,
		"ratelimit-policy":    `"slow";q=2;w=20`,
		"x-ratelimit-reason":  "token_bucket_exceeded",
		"content-type":        "application/json",
	}
	for name, want := range wantHdr {
		if got, _ := header(res.Local.Headers, name); got != want {
			t.Errorf("local reply %s = %q, want %q", name, got, want)
		}
		// What reaches the client: on_response_headers ran on our own reply
		// and must not have overwritten or duplicated anything.
		if got, _ := header(res.ResponseHeaders, name); got != want {
			t.Errorf("downstream %s = %q, want %q", name, got, want)
		}
		if n := headerCount(res.ResponseHeaders, name); n != 1 {
			t.Errorf("downstream %s appears %d times", name, n)
		}
	}
	var body struct {
		Error      string `json:"error"`
		Rule       string `json:"rule"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal(res.Local.Body, &body); err != nil {
		t.Fatalf("body %q: %v", res.Local.Body, err)
	}
	if body.Error != "rate_limited" || body.Rule != "slow" || body.RetryAfter != retry {
		t.Errorf("body = %+v", body)
	}
	if got := f.metric("sluice.rule.slow.rejected"); got != 1 {
		t.Errorf("rejected metric = %d", got)
	}
	// A rejection consumed nothing.
	if tok := f.tokens("slow", "client-7"); !near(tok, 0) {
		t.Errorf("tokens = %v", tok)
	}
}

// Retry-After is never earlier than the true wait: a request retried exactly
// Retry-After (and RateLimit-Reset) seconds later is admitted, for many rates,
// bursts and costs.
func TestRetryAfterNeverEarly(t *testing.T) {
	const cfg = `{"legacy_headers": true, "policies": [
	  {"name": "a", "rules": [{"name": "r1", "limit_keys": ["header:x-k"], "match": {"header:x-rule": "1"}, "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.3, "burst": 1, "cost_source": "header:x-cost"}},
	   {"name": "r2", "limit_keys": ["header:x-k"], "match": {"header:x-rule": "2"}, "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 7, "burst": 9, "cost_source": "header:x-cost"}},
	   {"name": "r3", "limit_keys": ["header:x-k"], "match": {"header:x-rule": "3"}, "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.01, "burst": 3, "cost_source": "header:x-cost"}}]}
	]}`
	f := start(t, cfg, 1)
	checked := 0
	for i := 0; i < 60; i++ {
		rule := fmt.Sprint(1 + i%3)
		cost := []string{"1", "0.7", "2.5", "3"}[i%4]
		key := fmt.Sprintf("c%d", i)
		kv := []string{"x-k", key, "x-rule", rule, "x-cost", cost}
		var res *wasmhost.Result
		for n := 0; n < 50; n++ {
			if res = f.do(kv...); res.Rejected {
				break
			}
		}
		if !res.Rejected {
			continue // cost above burst is rejected at once; otherwise drained
		}
		ra := mustAtoi(t, mustHeader(t, res.Local.Headers, "retry-after"))
		reset := mustAtoi(t, mustHeader(t, res.Local.Headers, "ratelimit-reset"))
		if ra < reset || reset < 1 {
			t.Fatalf("Retry-After %d < RateLimit-Reset %d", ra, reset)
		}
		if c, b := mustFloat(t, cost), map[string]float64{"1": 1, "2": 9, "3": 3}[rule]; c > b {
			continue // cost > burst: never admissible
		}
		// Retrying after t (<= Retry-After) seconds is admitted.
		f.clock.Advance(time.Duration(reset) * time.Second)
		if again := f.do(kv...); again.Rejected {
			t.Fatalf("rule r%s cost %s: rejected again %d s later (Retry-After %d)", rule, cost, reset, ra)
		}
		checked++
	}
	if checked < 30 {
		t.Fatalf("only %d cases checked", checked)
	}
}

func mustFloat(t testing.TB, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustHeader(t testing.TB, hs []wasmhost.Header, name string) string {
	t.Helper()
	v, ok := header(hs, name)
	if !ok {
		t.Fatalf("no %s header in %v", name, hs)
	}
	return v
}

func TestXFFTrustedHops(t *testing.T) {
	rule := `"rules": [{"name": "ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]`
	t.Run("hops=0 ignores XFF", func(t *testing.T) {
		f := start(t, `{`+rule+`}`, 1)
		f.do("x-forwarded-for", "1.1.1.1", "@ip", "10.9.9.9:1")
		if _, ok := f.bucket("ip", "10.9.9.9"); !ok {
			t.Fatal("source.address not used")
		}
		if res := f.do("x-forwarded-for", "2.2.2.2", "@ip", "10.9.9.9:2"); !res.Rejected {
			t.Fatal("a new XFF value escaped the limit with hops=0")
		}
	})
	t.Run("hops=1", func(t *testing.T) {
		f := start(t, `{"xff_trusted_hops": 1, `+rule+`}`, 1)
		f.do("x-forwarded-for", "6.6.6.6, 203.0.113.5", "@ip", "10.0.0.1:1")
		if _, ok := f.bucket("ip", "203.0.113.5"); !ok {
			t.Fatalf("rightmost entry not used; keys %v", f.h.SharedData().Keys())
		}
		// Spoofed entries on the left do not give a new bucket.
		if res := f.do("x-forwarded-for", "7.7.7.7, 203.0.113.5", "@ip", "10.0.0.1:1"); !res.Rejected {
			t.Fatal("spoofed left entry escaped the limit")
		}
		// A different client behind the same proxy has its own bucket.
		if res := f.do("x-forwarded-for", "203.0.113.6", "@ip", "10.0.0.1:1"); res.Rejected {
			t.Fatal("a different client shares the bucket")
		}
	})
	t.Run("hops=2 and fallback", func(t *testing.T) {
		f := start(t, `{"xff_trusted_hops": 2, `+rule+`}`, 1)
		f.do("x-forwarded-for", "6.6.6.6, [2001:db8::7]:443, 10.0.0.2", "@ip", "10.0.0.1:1")
		if _, ok := f.bucket("ip", "2001:db8::7"); !ok {
			t.Fatalf("2nd entry from the right not used; keys %v", f.h.SharedData().Keys())
		}
		// Too few entries: source.address.
		f.do("x-forwarded-for", "198.51.100.1", "@ip", "[2001:db8::1]:5555")
		if _, ok := f.bucket("ip", "2001:db8::1"); !ok {
			t.Fatalf("no fallback to source.address; keys %v", f.h.SharedData().Keys())
		}
		// No XFF at all: source.address.
		f.do("@ip", "192.0.2.77:80")
		if _, ok := f.bucket("ip", "192.0.2.77"); !ok {
			t.Fatalf("no fallback without XFF; keys %v", f.h.SharedData().Keys())
		}
	})
}

func TestJWTClaimKeysAndMatch(t *testing.T) {
	const cfg = `{"policies": [
	  {"name": "p", "rules": [
	    {"name": "gold", "limit_keys": ["jwt:sub"], "match": {"jwt:plan": "gold", "method": "POST"}, "algorithm": "token_bucket",
	     "algorithm_config": {"rps": 0.001, "burst": 3}},
	    {"name": "by-org", "limit_keys": ["jwt:org", "path"], "match": {"path_prefix": "/api/"}, "algorithm": "token_bucket",
	     "algorithm_config": {"rps": 0.001, "burst": 2}}
	  ]}
	]}`
	f := start(t, cfg, 1)
	gold := bearer(`{"sub":"alice","plan":"gold","org":"acme"}`)
	if got := f.admitted(5, ":method", "POST", "authorization", gold); got != 3 {
		t.Fatalf("gold: %d admitted, want 3", got)
	}
	if _, ok := f.bucket("gold", "alice"); !ok {
		t.Fatal("no bucket keyed by the sub claim")
	}
	// GET does not match gold; falls to by-org keyed on org claim and path
	// (query excluded).
	if got := f.admitted(4, ":method", "GET", ":path", "/api/x?a=1", "authorization", gold); got != 2 {
		t.Fatalf("by-org: %d admitted, want 2", got)
	}
	if _, ok := f.bucket("by-org", "acme|/api/x"); !ok {
		t.Fatalf("composite key missing; keys %v", f.h.SharedData().Keys())
	}
	// Numeric claims become their JSON text.
	f.do(":path", "/api/y", "authorization", bearer(`{"org":42}`))
	if _, ok := f.bucket("by-org", "42|/api/y"); !ok {
		t.Fatalf("numeric claim key missing; keys %v", f.h.SharedData().Keys())
	}
	// Malformed or absent tokens: the keys are missing, the rule is skipped
	// (counted), the request passes.
	before := f.metric("sluice.rule.by-org.key_missing")
	for _, authz := range []string{"", "Bearer garbage", "Bearer a.!!!.c", "Basic Zm9vOmJhcg==", bearer(`{"org":null}`), bearer(`[1]`)} {
		kv := []string{":path", "/api/z"}
		if authz != "" {
			kv = append(kv, "authorization", authz)
		}
		for i := 0; i < 3; i++ {
			if res := f.do(kv...); res.Rejected {
				t.Fatalf("authz %q rejected", authz)
			}
		}
	}
	if got := f.metric("sluice.rule.by-org.key_missing") - before; got != 18 {
		t.Errorf("key_missing grew by %d, want 18", got)
	}
}

func TestMissingKeys(t *testing.T) {
	const cfg = `{"rules": [
	  {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 2}},
	  {"name": "anon", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}
	]}`
	f := start(t, cfg, 1)
	// With a key: limited per key (anon does not apply: first applying rule wins).
	if got := f.admitted(3, "x-api-key", "k"); got != 2 {
		t.Fatalf("per-key: %d admitted", got)
	}
	// Without a key (or with an empty one): per-key is skipped and counted,
	// The next rule of the policy (per IP) applies.
	if got := f.admitted(2, "@ip", "10.3.3.3:1"); got != 1 {
		t.Fatalf("anon: %d admitted, want 1", got)
	}
	if got := f.admitted(1, "x-api-key", "", "@ip", "10.3.3.3:1"); got != 0 {
		t.Fatal("an empty key escaped the per-IP rule")
	}
	if got := f.metric("sluice.rule.per-key.key_missing"); got != 3 {
		t.Errorf("key_missing = %d, want 3", got)
	}
	if _, ok := f.bucket("per-key", ""); ok {
		t.Error("a bucket was created for a missing key")
	}
	for _, k := range f.h.SharedData().Keys() {
		if rule, _, _, ok := state.ParseKey(k); ok && rule == "per-key" {
			if v, _, _ := f.h.SharedData().Get(k); strings.HasSuffix(string(v), ":") {
				t.Errorf("a bucket with an empty identity: %s = %q", k, v)
			}
		}
	}
	// No source.address at all (and no other rule): the request passes.
	r := rq("x-other", "1")
	delete(r.Properties, "source.address")
	if res := f.doOn(0, r); res.Rejected {
		t.Fatal("request without any key value rejected")
	}
}

func TestKeysMethodHostQueryPath(t *testing.T) {
	const cfg = `{"rules": [{"name": "mix", "limit_keys": ["method", "host", "query:tenant", "path"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}`
	f := start(t, cfg, 1)
	f.do(":method", "PUT", ":authority", "API.Example.com", ":path", "/v1/items?tenant=a%7Cb&x=1")
	want := `PUT|api.example.com|a\|b|/v1/items`
	if _, ok := f.bucket("mix", want); !ok {
		t.Fatalf("bucket %q not found; keys %v", want, f.h.SharedData().Keys())
	}
	if res := f.do(":method", "PUT", ":authority", "api.example.com", ":path", "/v1/items?x=2&tenant=a|b"); !res.Rejected {
		t.Fatal("same composite key (host case, query order) not limited")
	}
}

func TestLongAndBinaryKeysBounded(t *testing.T) {
	const cfg = `{"rules": [{"name": "big", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 0.001, "burst": 1}}]}`
	f := start(t, cfg, 1)
	long := strings.Repeat("k", 10000)
	if got := f.admitted(2, "x-api-key", long); got != 1 {
		t.Fatalf("%d admitted with a 10k key", got)
	}
	if got := f.admitted(1, "x-api-key", long[:9999]+"j"); got != 1 {
		t.Fatal("a different long key shares the bucket")
	}
	for _, k := range f.h.SharedData().Keys() {
		if len(k) > 200 {
			t.Errorf("shared-data key of %d bytes", len(k))
		}
	}
	if f.h.SharedData().Bytes() > 2000 {
		t.Errorf("shared data holds %d bytes", f.h.SharedData().Bytes())
	}
	bin := "\x01\x7f\xff\xfe|\\#\t"
	if got := f.admitted(2, "x-api-key", bin); got != 1 {
		t.Fatalf("%d admitted with a binary key", got)
	}
	// Values larger than the malloc scratch (64 KiB) get memory of their
	// own (hostcalls_direct.go); they must read back whole all the same,
	// before and after small ones.
	huge := strings.Repeat("h", 70_000)
	if got := f.admitted(2, "x-api-key", huge); got != 1 {
		t.Fatalf("%d admitted with a 70,000-byte key", got)
	}
	if got := f.admitted(1, "x-api-key", huge[:69_999]+"i"); got != 1 {
		t.Fatal("a 70,000-byte key differing in its last byte shares the bucket")
	}
	if got := f.admitted(1, "x-api-key", "small"); got != 1 {
		t.Fatal("a small key after a huge one is limited")
	}
	if got := f.admitted(1, "x-api-key", huge); got != 0 {
		t.Fatal("the first 70,000-byte key got a new bucket")
	}
}

func TestCorruptStateIsReplaced(t *testing.T) {
	for _, maxKeys := range []int{0, policy.DefaultMaxKeys} {
		t.Run(fmt.Sprintf("max_keys=%d", maxKeys), func(t *testing.T) {
			cfg := fmt.Sprintf(`{"rules": [{"name": "c", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
			  "max_keys": %d, "algorithm_config": {"rps": 0.001, "burst": 3}}]}`, maxKeys)
			f := start(t, cfg, 1)
			// Junk where the filter looks: the exact key, or the group (a
			// junk group reads as empty, a junk way as free).
			keys := []string{f.stateKey("c", "k")}
			for _, junk := range []string{"garbage", "NaN:1", "", "5:-1", "1:2:3", "0123456789abcdef:1:2:", "0123456789abcdef:1:2:k",
				"\x04\xff", "\x04\x03abc\x00", "\x04\x00\x00\x00\x00\x00", "\x07\xff", "\x07\x03\x08\x00\x00", "\x07\x01\x08\x01k"} {
				for _, key := range keys {
					if st := f.h.SharedData().Set(key, []byte(junk), 0); st != wasmhost.StatusOK {
						t.Fatalf("set: %d", st)
					}
				}
				if res := f.do("x-api-key", "k"); res.Rejected {
					t.Fatalf("junk %q: rejected", junk)
				}
				if tok := f.tokens("c", "k"); !near(tok, 2) {
					t.Fatalf("junk %q: tokens %v, want a fresh bucket minus 1", junk, tok)
				}
			}
			if logsContaining(f.h, wasmhost.LogLevelWarn, "undecodable") == 0 {
				t.Error("corrupt state not logged")
			}
		})
	}
}

func TestMetricsDefinedAtConfigure(t *testing.T) {
	f := start(t, fairvisorTiered, 2)
	for _, rule := range []string{"enterprise", "free"} {
		for _, m := range []string{"allowed", "rejected", "shadow_rejected", "fail_open", "cas_retries", "key_missing", "overflowed"} {
			name := "sluice.rule." + rule + "." + m
			if v, ok := f.h.Metric(name); !ok || v != 0 {
				t.Errorf("%s = %d, %v before any request; want defined and 0", name, v, ok)
			}
		}
	}
	for _, name := range []string{"sluice.config_rejected", "sluice.panics_recovered", "sluice.refund_failed"} {
		if _, ok := f.h.Metric(name); !ok {
			t.Errorf("%s not defined", name)
		}
	}
	// Counts from several VMs add up.
	for i := 0; i < 10; i++ {
		f.doOn(i%2, rq("x-api-key", "k"))
	}
	if got := f.metric("sluice.rule.free.allowed"); got != 10 {
		t.Errorf("free.allowed = %d", got)
	}
}

// Extreme (but valid) configurations give sane header values.
func TestExtremeConfigValues(t *testing.T) {
	cfg := fmt.Sprintf(`{"legacy_headers": true, "rules": [
	  {"name": "huge", "limit_keys": ["header:x-a"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e9, "burst": %g}},
	  {"name": "tiny", "limit_keys": ["header:x-b"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1e-9, "burst": 0.5}}
	]}`, policy.MaxBurst)
	f := start(t, cfg, 1)
	res := f.do("x-a", "1")
	if res.Rejected {
		t.Fatal("huge rejected")
	}
	if v, _ := header(res.ResponseHeaders, "ratelimit-limit"); v != fmt.Sprint(int64(policy.MaxBurst)) {
		t.Errorf("limit = %q", v)
	}
	res = f.do("x-b", "1")
	if !res.Rejected {
		t.Fatal("cost 1 > burst 0.5 admitted")
	}
	ra := mustAtoi(t, mustHeader(t, res.Local.Headers, "retry-after"))
	if ra < 1 || ra > math.MaxInt32 {
		t.Errorf("retry-after = %d", ra)
	}
}
