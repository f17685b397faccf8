package fleettest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// ChargeLimit is the bucket of Charges: one token per 100 s (nothing
// refills while a test runs), a burst of 20 and a debt of 10, so a charge
// may leave a backlog of at most 3000 s.
var ChargeLimit = redisgcra.Limit{Rate: 0.01, Burst: 20, MaxDebt: 10}

// Charges runs the cases of a charge against a backend, on bucket key
// (which must not exist): unconditional, into debt, capped at the burst
// plus the debt, never moving the TAT back, 0 a query, several ops of one
// call in order. It checks TATs (now + backlog), which the test's own pace
// cannot move, except where the cap is measured from now.
func Charges(t *testing.T, run RunFunc, key string) {
	t.Helper()
	l := ChargeLimit
	do := mustRun(t, run)
	take := func(n uint64) redisgcra.Op { return redisgcra.Op{Key: key, Amount: l.Cost(n), Tau: l.Tau()} }
	charge := func(n uint64, cap int64) redisgcra.Op {
		return redisgcra.Op{Key: key, Amount: l.Cost(n), Tau: cap, Charge: true}
	}
	tat := func(o redisgcra.Outcome) int64 { return o.Now + o.Backlog }

	o := do(charge(3, l.ChargeCap()))[0]
	if !o.Allowed || o.Backlog != 300e6 || o.Charged != 300e6 {
		t.Fatalf("charge 3 of a full bucket: %+v, want allowed, backlog and charged 300 s", o)
	}
	t0 := o.Now
	if o := do(take(15))[0]; !o.Allowed || tat(o) != t0+1800e6 || o.Charged != 0 {
		t.Fatalf("take 15 with 17 left: %+v", o)
	}
	o = do(charge(10, l.ChargeCap()))[0]
	if !o.Allowed || tat(o) != t0+2800e6 || o.Charged != 1000e6 || l.Remaining(o.Backlog) != 0 {
		t.Fatalf("charge 10 with 2 left: %+v, want all 10 taken, 8 into debt", o)
	}
	if o := do(take(1))[0]; o.Allowed || tat(o) != t0+2800e6 {
		t.Fatalf("take 1 in debt: %+v, want refused, nothing taken", o)
	}
	// The cap: burst + debt = 3000 s from now.
	o = do(charge(10, l.ChargeCap()))[0]
	if !o.Allowed || o.Backlog != l.ChargeCap() || o.Charged <= 200e6 || o.Charged > 200e6+60e6 {
		t.Fatalf("charge 10 with 2 tokens of debt left: %+v, want the backlog clamped at %d, about 200 s charged", o, l.ChargeCap())
	}
	t1 := tat(o)
	// A TAT past a lower cap (a lowered burst or max_debt) stays; a
	// charge of 0 is a query.
	noDebt := redisgcra.Limit{Rate: l.Rate, Burst: l.Burst}
	outs := do(charge(5, noDebt.ChargeCap()), charge(0, l.ChargeCap()))
	for i, o := range outs {
		if !o.Allowed || tat(o) != t1 || o.Charged != 0 {
			t.Fatalf("op %d, a charge past a lower cap then a query: %+v, want allowed and the TAT unchanged", i, o)
		}
	}
	// Several ops in one call, in order: a return out of debt, a take,
	// a charge into debt again, a take refused.
	outs = do(redisgcra.Op{Key: key, Amount: l.Credit(20), Tau: l.Tau(), Return: true}, take(5), charge(4, l.ChargeCap()), take(2))
	want := []struct {
		allowed bool
		tat     int64
	}{{true, t1 - 2000e6}, {true, t1 - 1500e6}, {true, t1 - 1100e6}, {false, t1 - 1100e6}}
	for i, w := range want {
		if o := outs[i]; o.Allowed != w.allowed || tat(o) != w.tat {
			t.Errorf("op %d of one call: %+v (TAT %d), want allowed=%v TAT %d", i, o, tat(o), w.allowed, w.tat)
		}
	}
	if outs[2].Charged != 400e6 {
		t.Errorf("the call's charge added %d us, want 400 s", outs[2].Charged)
	}
}

// ChargesLoseNothing runs goroutines each charging one token perCaller
// times at once on one bucket whose debt never caps them: every charge
// adds exactly one token's cost, and the TAT ends exactly that many costs
// past the first charge's now (no update lost, none applied twice).
func ChargesLoseNothing(t *testing.T, run RunFunc, key string, goroutines, perCaller int) {
	t.Helper()
	l := redisgcra.Limit{Rate: 0.001, Burst: 1, MaxDebt: 1e6}
	op := redisgcra.Op{Key: key, Amount: l.Cost(1), Tau: l.ChargeCap(), Charge: true}
	var mu sync.Mutex
	var first int64 // the least TAT after a charge: the first one's
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range perCaller {
				outs, err := run(context.Background(), []redisgcra.Op{op})
				if err != nil {
					t.Error(err)
					return
				}
				o := outs[0]
				if !o.Allowed || o.Charged != op.Amount {
					t.Errorf("a charge: %+v, want allowed and %d us charged", o, op.Amount)
				}
				mu.Lock()
				if tat := o.Now + o.Backlog; first == 0 || tat < first {
					first = tat
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	outs, err := run(context.Background(), []redisgcra.Op{{Key: key, Tau: l.Tau()}})
	if err != nil {
		t.Fatal(err)
	}
	want := first + int64(goroutines*perCaller-1)*op.Amount
	if got := outs[0].Now + outs[0].Backlog; got != want {
		t.Errorf("TAT after %d charges %d, want %d (%+d charges' worth)", goroutines*perCaller, got, want,
			(got-want)/op.Amount)
	}
}

// WindowChargeLimit and WindowChargeCap are the window of WindowCharges:
// a limit of 10, and a debt of 5 (a charge counts up to 15).
const (
	WindowChargeLimit = 10
	WindowChargeCap   = 15
)

// WindowOp is a fixed window's (or quota's) counter op as the admin's
// server makes it: the window of identity key starting at startMS, a
// limit of limit (for a charge, its cap), expiring at expireMS.
func WindowOp(key string, startMS, expireMS, amount, limit int64) redisgcra.Op {
	return redisgcra.Op{Key: redisgcra.WindowKey("sluice", "charged-window", key, startMS), StartMS: startMS, Counter: true,
		Amount: amount, Limit: limit, ExpireAtMS: expireMS}
}

// WindowCharges runs the cases of a fixed window's (or quota's) charge
// against a backend, on the window of identity key starting at startMS
// (which must not exist), expiring at expireMS: unconditional, counted
// beyond the limit up to the cap (the limit plus the debt), a count past
// a lower cap left where it is, 0 a query, takes refused while the count
// leaves no room, several ops of one call in order, what each charge
// added (Outcome.Charged).
func WindowCharges(t *testing.T, run RunFunc, key string, startMS, expireMS int64) {
	t.Helper()
	do := mustRun(t, run)
	take := func(n int64) redisgcra.Op { return WindowOp(key, startMS, expireMS, n, WindowChargeLimit) }
	charge := func(n, limit int64) redisgcra.Op {
		op := WindowOp(key, startMS, expireMS, n, limit)
		op.Charge = true
		return op
	}
	give := func(n int64) redisgcra.Op {
		op := take(n)
		op.Return = true
		return op
	}
	check := func(what string, o redisgcra.Outcome, allowed bool, count, charged int64) {
		t.Helper()
		if o.Allowed != allowed || o.Count != count || o.Charged != charged || o.Now == 0 {
			t.Fatalf("%s: %+v, want allowed %v, count %d, charged %d and the backend's clock", what, o, allowed, count, charged)
		}
	}

	check("charge 3 of a window never leased", do(charge(3, WindowChargeCap))[0], true, 3, 3)
	check("take 6 with 7 left", do(take(6))[0], true, 9, 0)
	check("charge 4 with 1 left: past the limit", do(charge(4, WindowChargeCap))[0], true, 13, 4)
	check("take 1 past the limit", do(take(1))[0], false, 13, 0)
	check("charge 0: a query", do(charge(0, WindowChargeCap))[0], true, 13, 0)
	check("charge 10 with 2 left under the cap", do(charge(10, WindowChargeCap))[0], true, WindowChargeCap, 2)
	check("charge 1 at the cap", do(charge(1, WindowChargeCap))[0], true, WindowChargeCap, 0)
	// A count past a lower cap (a lowered limit or max_debt) stays.
	check("charge 5 past a lower cap", do(charge(5, WindowChargeLimit))[0], true, WindowChargeCap, 0)
	// Several ops in one call, in order: a return back under the limit,
	// a take, a charge past the limit again, a take refused.
	outs := do(give(8), take(2), charge(4, WindowChargeCap), take(1))
	want := []struct {
		allowed        bool
		count, charged int64
	}{{true, 7, 0}, {true, 9, 0}, {true, 13, 4}, {false, 13, 0}}
	for i, w := range want {
		check(fmt.Sprintf("op %d of one call", i), outs[i], w.allowed, w.count, w.charged)
	}
	// Without a debt (a fixed window, a quota charged by the request) a
	// charge fills the window up to its limit at most.
	other := WindowOp(key, startMS+1, expireMS, 25, WindowChargeLimit)
	other.Charge = true
	check("charge 25 of a window without a debt", do(other)[0], true, WindowChargeLimit, WindowChargeLimit)
}

// WindowChargesLoseNothing runs goroutines on one fixed window at once,
// each perCaller times: odd ones charge 1 (under a cap none of them
// reaches), even ones take 1 of a limit of limit. Every charge adds
// exactly 1, and the window ends holding exactly the charges and the
// takes granted (no update lost, none applied twice); no take is granted
// past the limit.
func WindowChargesLoseNothing(t *testing.T, run RunFunc, key string, startMS, expireMS int64, goroutines, perCaller int) {
	t.Helper()
	const limit = 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	var takes, charges int64
	for g := range goroutines {
		wg.Go(func() {
			for range perCaller {
				op := WindowOp(key, startMS, expireMS, 1, limit)
				if g%2 == 1 {
					op.Charge, op.Limit = true, 1<<40
				}
				outs, err := run(context.Background(), []redisgcra.Op{op})
				if err != nil {
					t.Error(err)
					return
				}
				o := outs[0]
				switch {
				case op.Charge && (!o.Allowed || o.Charged != 1):
					t.Errorf("a charge of 1: %+v, want allowed and 1 charged", o)
				case !op.Charge && o.Allowed && o.Count > limit:
					t.Errorf("a take granted to a count of %d, over the limit %d", o.Count, limit)
				}
				mu.Lock()
				if op.Charge {
					charges++
				} else if o.Allowed {
					takes++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	outs, err := run(context.Background(), []redisgcra.Op{WindowOp(key, startMS, expireMS, 0, limit)})
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[0].Count; got != charges+takes || takes > limit {
		t.Errorf("the window counts %d after %d charges and %d takes granted, want their sum (and at most %d takes)", got, charges, takes, limit)
	}
}

// mustRun is run as a function of the ops, failing the test on an error.
func mustRun(t *testing.T, run RunFunc) func(ops ...redisgcra.Op) []redisgcra.Outcome {
	return func(ops ...redisgcra.Op) []redisgcra.Outcome {
		t.Helper()
		outs, err := run(context.Background(), ops)
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
}
