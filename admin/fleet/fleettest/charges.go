package fleettest

import (
	"context"
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
	do := func(ops ...redisgcra.Op) []redisgcra.Outcome {
		t.Helper()
		outs, err := run(context.Background(), ops)
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
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
