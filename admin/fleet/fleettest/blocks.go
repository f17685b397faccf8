package fleettest

import (
	"testing"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// BlockLimit is the bucket of Blocks: one token per 100 s (nothing
// refills while a test runs), a burst of 20 (tau 2000 s), a debt of 10
// for charges and a block of 600 s, so a block leaves a backlog of
// exactly 2600 s.
var BlockLimit = redisgcra.Limit{Rate: 0.01, Burst: 20, MaxDebt: 10, BlockSeconds: 600}

// Blocks runs the cases of a block against a backend, on bucket key and
// on buckets named key plus a suffix (none of which may exist): a bucket
// that cannot pay the request is put the block below empty (TAT = now
// + tau + block, the op refused); one that can pay, or is below empty
// already (blocked, or in debt from a charge), is left as it is (the op
// allowed); a return during a block moves the TAT back by its credit;
// several ops of one call apply in order; the backlog is clamped to
// MaxMicros. It checks TATs (now + backlog), which the test's own pace
// cannot move, except where a block is measured from now.
func Blocks(t *testing.T, run RunFunc, key string) {
	t.Helper()
	l := BlockLimit
	do := mustRun(t, run)
	take := func(k string, n uint64) redisgcra.Op { return redisgcra.Op{Key: k, Amount: l.Cost(n), Tau: l.Tau()} }
	block := func(k string, n uint64) redisgcra.Op {
		return redisgcra.Op{Key: k, Amount: l.Cost(n), Tau: l.Tau(), Block: l.Block()}
	}
	giveBack := func(k string, n uint64) redisgcra.Op {
		return redisgcra.Op{Key: k, Amount: l.Credit(n), Tau: l.Tau(), Return: true}
	}
	tat := func(o redisgcra.Outcome) int64 { return o.Now + o.Backlog }
	const blocked = 2600e6 // tau + block_seconds

	if o := do(block(key, 20))[0]; !o.Allowed || o.Backlog != 0 {
		t.Fatalf("block after an ask of 20 on a full bucket of 20: %+v, want allowed and the bucket left full", o)
	}
	o := do(take(key, 15))[0]
	t0 := o.Now
	if !o.Allowed || o.Backlog != 1500e6 {
		t.Fatalf("take 15 of 20: %+v", o)
	}
	if o := do(block(key, 5))[0]; !o.Allowed || tat(o) != t0+1500e6 {
		t.Fatalf("block after an ask of 5 with 5 left: %+v, want allowed and the TAT unchanged", o)
	}
	o = do(block(key, 6))[0]
	if o.Allowed || o.Backlog != blocked || l.Remaining(o.Backlog) != 0 {
		t.Fatalf("block after an ask of 6 with 5 left: %+v, want refused (blocked) with backlog tau + 600 s = %d", o, int64(blocked))
	}
	t1 := tat(o)
	// Blocked: a block again, and a take, change nothing.
	for i, op := range []redisgcra.Op{block(key, 6), take(key, 1), block(key, 1)} {
		if o := do(op)[0]; o.Allowed == (i == 1) || tat(o) != t1 {
			t.Fatalf("op %d during the block: %+v, want the TAT %d unchanged (a block allowed, a take refused)", i, o, t1)
		}
	}
	// A return during the block moves the TAT back by its credit: 3
	// tokens, 300 s (still below empty); then 6 more, 600 s: 3 tokens
	// available, an ask of 2 can be paid, one of 4 blocks again.
	if o := do(giveBack(key, 3), block(key, 1)); tat(o[0]) != t1-300e6 || !o[1].Allowed || tat(o[1]) != t1-300e6 {
		t.Fatalf("a return of 3 during the block, then a block: %+v, want the TAT %d, the block allowed", o, t1-300e6)
	}
	if o := do(giveBack(key, 6), block(key, 2)); tat(o[0]) != t1-900e6 || !o[1].Allowed || tat(o[1]) != t1-900e6 {
		t.Fatalf("a return of 6 more, then a block of an ask of 2 with 3 left: %+v, want the TAT %d unchanged", o, t1-900e6)
	}
	if o := do(block(key, 4))[0]; o.Allowed || o.Backlog != blocked {
		t.Fatalf("a block of an ask of 4 with 3 left: %+v, want blocked again, backlog %d", o, int64(blocked))
	}

	// In debt from a charge: below empty, left as it is.
	debt := key + "-debt"
	o = do(redisgcra.Op{Key: debt, Amount: l.Cost(25), Tau: l.ChargeCap(), Charge: true})[0]
	if !o.Allowed || o.Backlog != 2500e6 {
		t.Fatalf("charge 25 of 20: %+v, want 5 in debt", o)
	}
	if o2 := do(block(debt, 1))[0]; !o2.Allowed || tat(o2) != tat(o) {
		t.Fatalf("a block in debt: %+v, want allowed and the TAT %d unchanged", o2, tat(o))
	}

	// Several ops of one call, in order: a take empties the bucket, a
	// block blocks it, a take is refused, a block changes nothing.
	outs := do(take(key+"-call", 20), block(key+"-call", 1), take(key+"-call", 1), block(key+"-call", 1))
	if !outs[0].Allowed || outs[0].Backlog != 2000e6 || outs[1].Allowed || outs[1].Backlog != blocked {
		t.Fatalf("a take of 20 then a block in one call: %+v, want granted, then blocked", outs[:2])
	}
	for i, o := range outs[2:] {
		if o.Allowed == (i == 0) || tat(o) != tat(outs[1]) {
			t.Fatalf("op %d after the block in the same call: %+v, want the TAT %d unchanged", i+2, o, tat(outs[1]))
		}
	}

	// Clamped: tau near the bound, a block past it leaves MaxMicros.
	huge := redisgcra.Op{Key: key + "-huge", Amount: redisgcra.MaxMicros, Tau: redisgcra.MaxMicros - 10, Block: l.Block()}
	if o := do(huge)[0]; o.Allowed || o.Backlog != redisgcra.MaxMicros {
		t.Fatalf("a block past 2^52 us: %+v, want blocked with the backlog clamped at %d", o, int64(redisgcra.MaxMicros))
	}
}
