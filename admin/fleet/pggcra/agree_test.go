package pggcra_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/shared/policy/policytest"
)

// The two backends answer every call alike: random calls of one to six
// ops (bucket takes, returns, charges, blocks and queries under bursts,
// debts and blocks that change; fixed window takes, returns, charges and queries under
// caps that change; sliding window and rolling window takes, returns and queries,
// several in one call, of one identity and of others) go to a Redis
// server and to PostgreSQL, and each op's outcome must be the same. A
// window's outcome depends only on the op, so it is compared exactly. A
// bucket's depends on the backend's clock, so its amounts are multiples
// of a thousand seconds: the test's few seconds never decide a take, and
// the backlog is compared in those units.
func TestRandomCallsAgreeWithTheRedisScripts(t *testing.T) {
	pg := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	client, err := redisgcra.NewClient(redisgcra.ClientOptions{Addrs: []string{fleettest.StartRedis(t).Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	rd := redisgcra.New(client)
	ctx := context.Background()

	g := newCallGen(rand.New(rand.NewPCG(7, policytest.Seed(t))), time.Now())
	seen := map[string]int{}
	for n := range 2500 {
		ops := g.call()
		want, err := rd.Run(ctx, ops)
		if err != nil {
			t.Fatalf("call %d on Redis: %v", n, err)
		}
		got, err := pg.Run(ctx, ops)
		if err != nil {
			t.Fatalf("call %d on PostgreSQL: %v", n, err)
		}
		for i, op := range ops {
			w, p := comparable(op, want[i]), comparable(op, got[i])
			if w != p {
				t.Fatalf("call %d, op %d of %d (%s):\nRedis      %s\nPostgreSQL %s\nthe call: %s", n, i+1, len(ops), describe(op, g.base), w, p, describeCall(ops, g.base))
			}
			verdict, _, _ := strings.Cut(w, ",")
			seen[kindOf(op)+" "+verdict]++
			if op.Charge && want[i].Charged < op.Amount {
				seen[kindOf(op)+" clamped"]++
			}
		}
	}
	// The run must have met every path: each kind of take both granted
	// and refused, and each kind of return.
	for _, path := range []string{
		"bucket-take granted", "bucket-take refused", "bucket-return granted", "bucket-query granted",
		"bucket-charge granted", "bucket-charge clamped",
		"bucket-block granted", "bucket-block refused", // left as it was; blocked
		"fixed-take granted", "fixed-take refused", "fixed-return granted",
		"fixed-charge granted", "fixed-charge clamped",
		"sliding-take granted", "sliding-take refused", "sliding-query granted",
		"rolling-take granted", "rolling-take refused", "rolling-return granted",
	} {
		if seen[path] == 0 {
			t.Errorf("no %s in the run: %v", path, seen)
		}
	}
}

// unit is a bucket op's unit of time, µs: far longer than the test runs.
const unit = 1_000_000_000

// comparable is what both backends must answer alike for op.
func comparable(op redisgcra.Op, o redisgcra.Outcome) string {
	verdict := "refused"
	if o.Allowed {
		verdict = "granted"
	}
	if o.Now == 0 {
		return verdict + " without the backend's clock"
	}
	if op.Counter {
		return fmt.Sprintf("%s, count %d, charged %d", verdict, o.Count, o.Charged)
	}
	return fmt.Sprintf("%s, backlog %d units, charged %d units", verdict, (o.Backlog+unit/2)/unit, (o.Charged+unit/2)/unit)
}

func kindOf(op redisgcra.Op) string {
	kind := "bucket"
	switch {
	case op.Rolling:
		kind = "rolling"
	case op.PrevKey != "":
		kind = "sliding"
	case op.Counter:
		kind = "fixed"
	}
	switch {
	case op.Return:
		return kind + "-return"
	case op.Charge && op.Amount > 0:
		return kind + "-charge"
	case op.Block > 0:
		return kind + "-block"
	case op.Amount == 0:
		return kind + "-query"
	}
	return kind + "-take"
}

func describe(op redisgcra.Op, base int64) string {
	s := fmt.Sprintf("%s %s amount %d", kindOf(op), op.Key, op.Amount)
	switch {
	case op.Charge && op.Counter:
		s += fmt.Sprintf(" cap %d", op.Limit)
	case op.Charge:
		s = fmt.Sprintf("%s %s amount %d units, burst and debt %d units", kindOf(op), op.Key, op.Amount/unit, op.Tau/unit)
	case op.Block > 0:
		s = fmt.Sprintf("%s %s amount %d units, burst %d units, block %d units", kindOf(op), op.Key, op.Amount/unit, op.Tau/unit, op.Block/unit)
	case !op.Counter:
		s = fmt.Sprintf("%s %s amount %d units, burst %d units", kindOf(op), op.Key, op.Amount/unit, op.Tau/unit)
	case op.Rolling:
		s += fmt.Sprintf(" limit %d cap %d, sub-period +%d ms, oldest +%d ms", op.Limit, op.MaxPerPeriod, op.FieldMS-base, op.OldestMS-base)
	case op.PrevKey != "":
		s += fmt.Sprintf(" limit %d, now +%d ms into the window", op.Limit, op.NowMS-op.StartMS)
	default:
		s += fmt.Sprintf(" limit %d", op.Limit)
	}
	return s
}

func describeCall(ops []redisgcra.Op, base int64) string {
	var b strings.Builder
	for i, op := range ops {
		fmt.Fprintf(&b, "\n  %d. %s", i+1, describe(op, base))
	}
	return b.String()
}

// callGen makes random calls over a few identities of each kind, its
// time moving forward window by window.
type callGen struct {
	rng  *rand.Rand
	base int64 // unix ms, on a minute: the first window's start
	// The windows' position: fixed and sliding windows are a minute
	// long, a rolling window is four sub-periods of a second.
	window, subPeriod int64
}

const (
	windowMS    = 60_000
	subPeriodMS = 1_000
	subPeriods  = 4
)

func newCallGen(rng *rand.Rand, now time.Time) *callGen {
	return &callGen{rng: rng, base: now.Truncate(time.Minute).UnixMilli(), subPeriod: subPeriods}
}

func (g *callGen) call() []redisgcra.Op {
	// Now and then the windows move on.
	if g.rng.IntN(40) == 0 {
		g.window++
	}
	if g.rng.IntN(8) == 0 {
		g.subPeriod++
	}
	ops := make([]redisgcra.Op, 1+g.rng.IntN(6))
	for i := range ops {
		ops[i] = g.op()
	}
	return ops
}

func (g *callGen) op() redisgcra.Op {
	id := []string{"a", "b", "c"}[g.rng.IntN(3)]
	amount := int64(g.rng.IntN(5))
	ret := g.rng.IntN(4) == 0
	expire := g.base + 24*3_600_000 // Redis must keep every key while the test runs
	// Now and then the op comes from an admin whose clock is behind, in
	// the previous (sub-)window.
	window, subPeriod := g.window, g.subPeriod
	if g.rng.IntN(6) == 0 {
		window, subPeriod = window-1, subPeriod-1
	}
	switch g.rng.IntN(4) {
	case 0:
		tau := int64([]int{3, 5, 8}[g.rng.IntN(3)]) * unit
		op := redisgcra.Op{Key: redisgcra.Key("sluice", "bucket", id), Amount: amount * unit, Tau: tau, Return: ret}
		switch k := g.rng.IntN(6); {
		case ret:
		case k < 2:
			// A charge: its cap the burst plus a debt of 0 to 3 units.
			op.Charge, op.Tau = true, tau+int64(g.rng.IntN(4))*unit
		case k == 2:
			// A block of 1 to 3 units for a request of 1 to 4.
			op.Block, op.Amount = int64(1+g.rng.IntN(3))*unit, int64(1+g.rng.IntN(4))*unit
		}
		return op
	case 1:
		start := g.base + (window-int64(g.rng.IntN(2)))*windowMS
		op := redisgcra.Op{Key: redisgcra.WindowKey("sluice", "fixed", id, start), StartMS: start, Counter: true,
			Amount: amount, Limit: g.limit(), Return: ret, ExpireAtMS: expire}
		if !ret && g.rng.IntN(3) == 0 {
			// A charge (a quota's): its cap the limit plus a debt of 0 to 3.
			op.Charge, op.Limit = true, op.Limit+int64(g.rng.IntN(4))
		}
		return op
	case 2:
		// A take reads the previous window; a return goes to the window
		// its lease was counted in, this one or the one before.
		start := g.base + window*windowMS
		if ret {
			start -= int64(g.rng.IntN(2)) * windowMS
			return redisgcra.Op{Key: redisgcra.WindowKey("sluice", "sliding", id, start), StartMS: start, Counter: true,
				Amount: amount, Limit: g.limit(), Return: true, ExpireAtMS: expire}
		}
		now := start + g.rng.Int64N(windowMS)
		return redisgcra.Op{Key: redisgcra.WindowKey("sluice", "sliding", id, start), StartMS: start, Counter: true,
			Amount: amount, Limit: g.limit(), ExpireAtMS: expire,
			PrevKey: redisgcra.WindowKey("sluice", "sliding", id, start-windowMS), NowMS: now, LengthMS: windowMS}
	}
	// A take counts in the current sub-period; a return goes to the
	// sub-period its lease was counted in, which may have left the window.
	field := g.base + subPeriod*subPeriodMS
	oldest := field - (subPeriods-1)*subPeriodMS
	if ret {
		field -= int64(g.rng.IntN(subPeriods+1)) * subPeriodMS
	}
	return redisgcra.Op{Key: redisgcra.RollingKey("sluice", "rolling", id), Counter: true, Rolling: true,
		FieldMS: field, OldestMS: oldest, MaxPerPeriod: int64([]int{0, 2, 4}[g.rng.IntN(3)]),
		Amount: amount, Limit: g.limit(), Return: ret, ExpireAtMS: expire}
}

func (g *callGen) limit() int64 { return int64([]int{3, 5, 10}[g.rng.IntN(3)]) }
