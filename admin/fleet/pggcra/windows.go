package pggcra

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// A window counter op (redisgcra.Op with Counter) is a row of
// sluice_fleet_windows: (Key, Start) with its count, created by the first
// lease of the window and deleted by Clean once ExpireAtMS has passed.

const windowSQL = `SELECT allowed, counted, now_us FROM ` + functionWindow + `($1, $2, $3, $4, $5, $6)`

// windowArgs are a call's window ops, sorted by key and window (in their
// order within one window): concurrent calls lock their rows in one order.
type windowArgs struct {
	at      []int // the op's index in the call
	keys    []string
	starts  []int64
	expires []int64
	amounts []int64
	limits  []int64
	rets    []bool
}

func newWindowArgs(ops []redisgcra.Op) windowArgs {
	var a windowArgs
	for i, op := range ops {
		if op.Counter {
			a.at = append(a.at, i)
		}
	}
	slices.SortStableFunc(a.at, func(i, j int) int {
		return cmp.Or(cmp.Compare(ops[i].Key, ops[j].Key), cmp.Compare(ops[i].StartMS, ops[j].StartMS))
	})
	for _, i := range a.at {
		op := ops[i]
		a.keys, a.starts, a.expires = append(a.keys, identity(op)), append(a.starts, op.StartMS), append(a.expires, op.ExpireAtMS)
		a.amounts, a.limits, a.rets = append(a.amounts, op.Amount), append(a.limits, op.Limit), append(a.rets, op.Return)
	}
	return a
}

// identity is the row's key of a counter op: its Key without the window
// start that redisgcra.WindowKey appends (the start is a column of its own).
func identity(op redisgcra.Op) string {
	return strings.TrimSuffix(op.Key, ":"+strconv.FormatInt(op.StartMS, 10))
}

func (a *windowArgs) args() []any {
	return []any{a.keys, a.starts, a.expires, a.amounts, a.limits, a.rets}
}

// read scans the window function's rows into out.
func (a *windowArgs) read(rows pgx.Rows, err error, out []redisgcra.Outcome) error {
	return readRows(rows, err, functionWindow, a.at, func(o *redisgcra.Outcome) []any {
		return []any{&o.Allowed, &o.Count, &o.Now}
	}, out)
}
