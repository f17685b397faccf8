package scenario

// The hot-key race: two VMs (two worker threads sharing one shared data)
// send requests for one fresh key concurrently, each until it is refused;
// a quota of 100 with nothing refilling during the trial must admit exactly
// 100 in every one of 200 trials, for the token bucket and each window
// algorithm. Over- or under-admission would mean a lost CAS update, a
// duplicate bucket from racing creations, or a refund gone wrong.

import (
	"fmt"
	"testing"
	"time"
)

func init() {
	register(Case{Name: "HotKeyRaceTwoVMsAdmitExactlyTheQuota", Run: hotKeyRace})
}

const raceTrials = 200

func hotKeyRace(t *testing.T, start Starter) {
	rule := func(alg, cfg string) string {
		return `{"name": "` + alg + `", "match": {"header:x-alg": "` + alg + `"}, "limit_keys": ["header:x-api-key"],
		  "algorithm": "` + alg + `", "algorithm_config": ` + cfg + `}`
	}
	h := mustStart(t, start, Options{VMs: 2, Start: alignedStart.Add(30 * time.Minute), Config: []byte(`{"rules": [` +
		rule("token_bucket", `{"rps": 0.0001, "burst": 100}`) + `,` +
		rule("fixed_window", `{"limit": 100, "window_seconds": 86400}`) + `,` +
		rule("sliding_window", `{"limit": 100, "window_seconds": 86400}`) + `,` +
		rule("rolling_window", `{"limit": 100, "window_seconds": 86400, "period_seconds": 3600}`) + `]}`)})
	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window", "rolling_window"} {
		for trial := 0; trial < raceTrials; trial++ {
			r := req("x-alg", alg, "x-api-key", fmt.Sprintf("%s-%d", alg, trial))
			if got := raceUntilRefused(t, h, r); got != 100 {
				t.Fatalf("%s, trial %d: %d admitted, want exactly 100 (cas_retries %d, fail_open %d)", alg, trial, got,
					metric(h, "sluice.rule."+alg+".cas_retries"), metric(h, "sluice.rule."+alg+".fail_open"))
			}
		}
		wantMetrics(t, h, map[string]uint64{
			"sluice.rule." + alg + ".allowed":   100 * raceTrials,
			"sluice.rule." + alg + ".fail_open": 0,
			"sluice.rule." + alg + ".rejected":  2 * raceTrials,
		})
		t.Logf("%s: %d trials, cas_retries %d", alg, raceTrials, metric(h, "sluice.rule."+alg+".cas_retries"))
	}
	noRecoveredPanics(t, h)
}

// raceUntilRefused sends r on VMs 0 and 1 from two goroutines, each until
// its first rejection, and returns how many were admitted.
func raceUntilRefused(t *testing.T, h Host, r Request) int {
	t.Helper()
	type out struct {
		admitted int
		err      error
	}
	ch := make(chan out, 2)
	for vm := 0; vm < 2; vm++ {
		go func(vm int) {
			n := 0
			for {
				res, err := h.HTTP(vm, r)
				switch {
				case err != nil:
					ch <- out{err: fmt.Errorf("VM %d: %w", vm, err)}
					return
				case res.Paused:
					ch <- out{err: fmt.Errorf("VM %d: a request paused", vm)}
					return
				case res.Rejected:
					ch <- out{admitted: n}
					return
				}
				n++
			}
		}(vm)
	}
	total := 0
	for i := 0; i < 2; i++ {
		o := <-ch
		if o.err != nil {
			t.Fatalf("%s: %v", h.Name(), o.err)
		}
		total += o.admitted
	}
	return total
}
