package pggcra

import (
	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// A window counter op (redisgcra.Op with Counter) is a row of
// sluice_fleet_windows: (Key, Start) with its count, created by the first
// lease of the window and deleted by Clean once ExpireAtMS has passed. A
// sliding window's take reads two rows of its identity (the current
// window's and the previous one's); a rolling window keeps one row per
// sub-period under its identity (RollingKey), keyed by the sub-period's
// start. A fixed window's or quota's charge (Op.Charge) is an upsert of
// its window's row, up to the charge's cap (Op.Limit).

const windowSQL = `SELECT allowed, counted, now_us, charged FROM ` + functionWindow + `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// The window function's kinds of op.
const (
	kindFixed   int16 = 0 // a fixed window or quota, and a sliding window's return
	kindSliding int16 = 1 // a sliding window's take
	kindRolling int16 = 2
)

// windowArgs are a call's window ops in redisgcra.Order: concurrent calls
// take their identity locks and row locks in one order.
type windowArgs struct {
	at      []int // the op's index in the call
	keys    []string
	starts  []int64
	expires []int64
	amounts []int64
	limits  []int64
	rets    []bool
	charges []bool // a fixed window's or quota's charge: Amount counted unconditionally, up to limits[i]
	kinds   []int16
	nows    []int64 // sliding: the admin's now, unix ms
	lengths []int64 // sliding: the window's length, ms
	oldests []int64 // rolling: the oldest sub-period's start, unix ms
	caps    []int64 // rolling: the most one sub-period admits, 0 for no cap
}

func newWindowArgs(ops []redisgcra.Op) windowArgs {
	var a windowArgs
	for _, i := range redisgcra.Order(ops) {
		op := ops[i]
		if !op.Counter {
			continue
		}
		kind := kindFixed
		switch {
		case op.Rolling:
			kind = kindRolling
		case op.PrevKey != "" && !op.Return:
			kind = kindSliding
		}
		a.at = append(a.at, i)
		a.keys, a.starts, a.expires = append(a.keys, op.Identity()), append(a.starts, op.WindowStart()), append(a.expires, op.ExpireAtMS)
		a.amounts, a.limits, a.rets = append(a.amounts, op.Amount), append(a.limits, op.Limit), append(a.rets, op.Return)
		a.charges = append(a.charges, op.Charge)
		a.kinds, a.nows, a.lengths = append(a.kinds, kind), append(a.nows, op.NowMS), append(a.lengths, op.LengthMS)
		a.oldests, a.caps = append(a.oldests, op.OldestMS), append(a.caps, op.MaxPerPeriod)
	}
	return a
}

// windowWarmUp are the window function's arguments of a query of each
// kind of window (a take of 0) of an identity no real one is named.
func windowWarmUp() []any {
	q := windowArgs{}
	for _, k := range []int16{kindFixed, kindSliding, kindRolling} {
		q.keys, q.kinds, q.rets, q.charges = append(q.keys, ""), append(q.kinds, k), append(q.rets, false), append(q.charges, false)
		for _, col := range []*[]int64{&q.starts, &q.expires, &q.amounts, &q.limits, &q.nows, &q.oldests, &q.caps} {
			*col = append(*col, 0)
		}
		q.lengths = append(q.lengths, 1)
	}
	return q.args()
}

func (a *windowArgs) args() []any {
	return []any{a.keys, a.starts, a.expires, a.amounts, a.limits, a.rets, a.kinds, a.nows, a.lengths, a.oldests, a.caps, a.charges}
}

// read scans the window function's rows into out.
func (a *windowArgs) read(rows pgx.Rows, err error, out []redisgcra.Outcome) error {
	return readRows(rows, err, functionWindow, a.at, func(o *redisgcra.Outcome) []any {
		return []any{&o.Allowed, &o.Count, &o.Now, &o.Charged}
	}, out)
}
