package e2e

import (
	"sort"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// Global sliding and rolling windows end to end: three Envoy-like processes
// of two VMs each run the compiled plugin against the admin's rate limit
// service on a real Redis (the rolling window on a real PostgreSQL too), on
// the real clock, under four times the limit.
// The checks read the admitted requests' timestamps. A request was spent
// between its call and its answer (admission.before, after); only those
// whose both ends fall in one (sub-)window are counted, and a window's
// requests count up to time t only once answered by t, so the use the
// checks see never exceeds the true use: a breach they find is real.

// runWindowFleet runs rule "g" with algorithm and config under load for d,
// the admin's RLS started by start, and returns the admissions, sorted by
// their answers.
func runWindowFleet(t *testing.T, start func(t *testing.T, policy string) (*adminRLS, func()), algorithm, config string, d time.Duration) []admission {
	t.Helper()
	policy := fleetWindowPolicy(algorithm, config, "deny")
	rls, _ := start(t, policy)
	f := fleethosts.Start(t, fleethosts.Options{Config: policy, RLS: rls.url, Hosts: 3})
	f.StartTickers()
	adm := windowLoad(f, "acme", d)
	f.Wait()
	f.CheckNoTraps()
	if len(adm) == 0 {
		t.Fatal("nothing admitted")
	}
	t.Logf("admitted %d; backend errors %d", len(adm), f.Metric("sluice.rule.g.backend_errors"))
	sort.Slice(adm, func(i, j int) bool { return adm[i].after.Before(adm[j].after) })
	return adm
}

// fleetBackendNamed is the start function of the fleetBackends entry name.
func fleetBackendNamed(t *testing.T, name string) func(t *testing.T, policy string) (*adminRLS, func()) {
	for _, be := range fleetBackends {
		if be.name == name {
			return be.start
		}
	}
	t.Fatalf("no fleet backend %q", name)
	return nil
}

// periodOf returns the index of the aligned period of length p holding
// both ends of a, or false when it straddles a boundary.
func periodOf(a admission, p time.Duration) (int64, bool) {
	k := a.before.UnixNano() / int64(p)
	return k, k == a.after.UnixNano()/int64(p)
}

// TestFleetSlidingWindowEstimateNeverPassesTheLimit: a global sliding
// window of 50 per second for 3.5 s. At every admission the estimate
// prev × (1 − f) + cur of the requests admitted, as the sliding window
// defines it, is at most the limit; the fleet admits most of what the
// windows allow.
func TestFleetSlidingWindowEstimateNeverPassesTheLimit(t *testing.T) {
	const limit = 50
	const win = time.Second
	adm := runWindowFleet(t, fleetBackendNamed(t, "redis"), "sliding_window", `{"limit":50,"window_seconds":1}`, 3500*time.Millisecond)
	perWindow := map[int64]int{}
	type counted struct {
		k     int64
		after time.Time
	}
	var sure []counted
	for _, a := range adm {
		if k, ok := periodOf(a, win); ok {
			perWindow[k]++
			sure = append(sure, counted{k, a.after})
		}
	}
	cur, curK, worst := 0, int64(-1), 0.0
	for _, c := range sure { // by answer time: cur counts those answered by now
		if c.k != curK {
			cur, curK = 0, c.k
		}
		cur++
		f := float64(c.after.UnixNano()%int64(win)) / float64(win)
		est := float64(perWindow[c.k-1])*(1-f) + float64(cur)
		worst = max(worst, est)
		if est > limit+1e-9 {
			t.Fatalf("at %s: estimate %.2f = %d x (1 - %.3f) + %d, over the limit %d",
				c.after.Format("15:04:05.000"), est, perWindow[c.k-1], f, cur, limit)
		}
	}
	t.Logf("per window %v, highest estimate %.2f", perWindow, worst)
	if worst < limit*6/10 {
		t.Errorf("the estimate never passed %.2f of %d: leases lost", worst, limit)
	}
}

// TestFleetRollingWindowSumNeverPassesTheLimit: a global rolling window of
// 60 per 2 s in 1 s sub-periods, at most 40 in one, for 4.5 s. Every two
// consecutive sub-periods admit at most 60, each at most 40, and the fleet
// admits most of it. On each backend.
func TestFleetRollingWindowSumNeverPassesTheLimit(t *testing.T) {
	for _, be := range fleetBackends {
		t.Run(be.name, func(t *testing.T) { checkFleetRollingWindow(t, be.start) })
	}
}

func checkFleetRollingWindow(t *testing.T, start func(t *testing.T, policy string) (*adminRLS, func())) {
	const limit, perPeriod, periods = 60, 40, 2
	const period = time.Second
	adm := runWindowFleet(t, start, "rolling_window", `{"limit":60,"window_seconds":2,"period_seconds":1,"max_per_period":40}`,
		4500*time.Millisecond)
	count := map[int64]int{}
	for _, a := range adm {
		if k, ok := periodOf(a, period); ok {
			count[k]++
		}
	}
	first, _ := periodOf(adm[0], period)
	last, _ := periodOf(adm[len(adm)-1], period)
	best := 0
	for k := first; k <= last; k++ {
		if count[k] > perPeriod {
			t.Errorf("sub-period %d admitted %d, over max_per_period %d", k, count[k], perPeriod)
		}
		sum := 0
		for j := k - periods + 1; j <= k; j++ {
			sum += count[j]
		}
		if sum > limit {
			t.Errorf("the window ending with sub-period %d admitted %d, over the limit %d", k, sum, limit)
		}
		best = max(best, sum)
	}
	t.Logf("per sub-period %v", count)
	if best < limit*6/10 {
		t.Errorf("no window admitted more than %d of %d: leases lost", best, limit)
	}
}
