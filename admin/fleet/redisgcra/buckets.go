package redisgcra

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed gcra.lua
var scriptSource string

var script = redis.NewScript(scriptSource)

//go:embed window.lua
var windowSource string

var windowScript = redis.NewScript(windowSource)

//go:embed sliding.lua
var slidingSource string

var slidingScript = redis.NewScript(slidingSource)

//go:embed rolling.lua
var rollingSource string

var rollingScript = redis.NewScript(rollingSource)

// Op is one bucket (or window counter) operation of a batch.
type Op struct {
	Key    string // the bucket's Redis key (see Key; WindowKey for a counter)
	Amount int64  // microseconds: Limit.Cost of the tokens taken or charged, or Limit.Credit of those returned; whole requests for a counter
	Tau    int64  // Limit.Tau; for a charge, Limit.ChargeCap
	Return bool   // give Amount back instead of taking it
	// Charge takes Amount unconditionally, into debt: a bucket's TAT
	// moves by Amount but leaves a backlog of at most Tau (the charge's
	// cap); a fixed window's or quota's count (Counter, neither sliding
	// nor rolling) grows by Amount to at most Limit (for a charge, the
	// limit plus the debt allowed). Neither ever moves back. Always
	// allowed.
	Charge bool
	// Block, when > 0, makes the op a block of a bucket (not a counter,
	// a return or a charge) for a request costing Amount (Limit.Cost of
	// its tokens): Block is the block's length in microseconds
	// (Limit.Block), Tau the bucket's. A bucket below empty (TAT - now >
	// Tau: in debt, or blocked already) or able to pay Amount now (TAT +
	// Amount - now <= Tau) is left as it is; any other is put Block below
	// empty: TAT = now + Tau + Block (at most now + MaxMicros). The
	// outcome is refused (Allowed false) when, and only when, the op put
	// the block in place.
	Block int64
	// Counter makes the op a window counter's (window.lua): at most
	// Limit requests per window, the key expiring at ExpireAtMS (unix ms).
	Counter    bool
	Limit      int64
	ExpireAtMS int64
	// StartMS is a fixed or sliding window counter's window start, unix
	// ms (in Key: WindowKey).
	StartMS int64
	// PrevKey makes a counter's take a sliding window's (sliding.lua):
	// granted only if Prev's count × (1 − f) + Key's count + Amount <=
	// Limit, f = (NowMS − StartMS) / LengthMS, the fraction of the window
	// [StartMS, StartMS+LengthMS) elapsed on the admin's clock. A sliding
	// window's return is a plain counter op on the window leased in.
	PrevKey         string
	NowMS, LengthMS int64
	// Rolling makes a counter op a rolling window's (rolling.lua): Key is
	// the identity's hash (RollingKey), FieldMS the start of the
	// sub-period counted in (or returned to), OldestMS the start of the
	// oldest sub-period still in the window; MaxPerPeriod caps one
	// sub-period (0: no cap).
	Rolling                         bool
	FieldMS, OldestMS, MaxPerPeriod int64
}

// Outcome is the result of one Op.
type Outcome struct {
	Allowed bool  // the tokens were taken (always true for a return); for a block, false when it put the block in place
	Backlog int64 // TAT - now after the op, microseconds: the time until the bucket is full again (0 for a counter)
	Now     int64 // Redis TIME when the op ran, microseconds since the epoch
	// Charged is what a charge added: microseconds to a bucket's TAT,
	// requests to a window's count; its Amount, or less when the cap
	// clamped it (0 for other ops).
	Charged int64
	// Count is a counter's use after the op: its requests in the window
	// (a fixed window, a quota), or the limit minus the whole requests
	// that still fit (a sliding window's estimate rounded up; a rolling
	// window's sum, or its sub-period's count when the cap is tighter).
	Count int64
}

// WindowKey is the Redis key of one window counter: the bucket's Key (its
// hash tag, so a Cluster keeps every window of one identity on one shard)
// followed by the window's start in unix milliseconds.
func WindowKey(domain, rule, id string, startMS int64) string {
	return Key(domain, rule, id) + ":" + strconv.FormatInt(startMS, 10)
}

// RollingKey is the Redis key of one rolling window's hash of sub-period
// counts: the bucket's Key (its hash tag) followed by ":rolling".
func RollingKey(domain, rule, id string) string {
	return Key(domain, rule, id) + rollingSuffix
}

// rollingSuffix ends a rolling window's key.
const rollingSuffix = ":rolling"

// Key is the Redis key of one bucket: "sluice:{<domain>:<rule>:<id>}". The
// braces are Redis Cluster's hash tag: only the part inside decides the
// slot, so every key ever kept for this bucket lands on the same shard and
// may be used together in one script. The parts are length-prefixed so
// that no choice of domain, rule and id can produce another bucket's key.
func Key(domain, rule, id string) string {
	var b strings.Builder
	b.Grow(len("sluice:{}") + len(domain) + len(rule) + len(id) + 12)
	writeRulePrefix(&b, domain, rule)
	b.WriteString(strconv.Itoa(len(id)))
	b.WriteByte('.')
	b.WriteString(id)
	b.WriteByte('}')
	return b.String()
}

// RulePrefix is how every key of rule in domain starts, whatever the
// identity: Key's, WindowKey's and RollingKey's ("sluice:{<domain>:<rule>:",
// length-prefixed). The lengths make it no other rule's: rule "g" is
// "1.g:", which "2.g2:" does not start with.
func RulePrefix(domain, rule string) string {
	var b strings.Builder
	b.Grow(len("sluice:{::") + len(domain) + len(rule) + 8)
	writeRulePrefix(&b, domain, rule)
	return b.String()
}

func writeRulePrefix(b *strings.Builder, domain, rule string) {
	b.WriteString("sluice:{")
	for _, part := range []string{domain, rule} {
		b.WriteString(strconv.Itoa(len(part)))
		b.WriteByte('.')
		b.WriteString(part)
		b.WriteByte(':')
	}
}

// Identity is what an op's windows share: a window counter's Key without
// the window start WindowKey appends; a rolling window's or a bucket's
// Key as it is.
func (op Op) Identity() string {
	if !op.Counter || op.Rolling {
		return op.Key
	}
	return strings.TrimSuffix(op.Key, ":"+strconv.FormatInt(op.StartMS, 10))
}

// WindowStart is the start of a counter op's (sub-)window, unix ms: a
// rolling window's sub-period (FieldMS), another window's StartMS.
func (op Op) WindowStart() int64 {
	if op.Rolling {
		return op.FieldMS
	}
	return op.StartMS
}

// Order is the order in which both backends apply a call's ops, as
// indices into ops: the bucket ops in the call's order, then the window
// counter ops by Identity and WindowStart, in the call's order within one
// window. PostgreSQL needs one order so that concurrent calls take their
// locks alike and cannot deadlock; Redis follows it so that a call
// answers the same on both. Only ops of one identity's different windows
// change places: a return to a window goes before a take in a later
// window of the identity, whose sliding estimate or rolling sum it frees.
func Order(ops []Op) []int {
	type window struct {
		at    int
		id    string
		start int64
	}
	order := make([]int, 0, len(ops))
	var windows []window
	for i, op := range ops {
		if op.Counter {
			windows = append(windows, window{i, op.Identity(), op.WindowStart()}) // each once, not per comparison
		} else {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(windows, func(a, b window) int {
		return cmp.Or(strings.Compare(a.id, b.id), cmp.Compare(a.start, b.start))
	})
	for _, w := range windows {
		order = append(order, w.at)
	}
	return order
}

// Buckets runs bucket operations on Redis (standalone, Sentinel or Cluster).
type Buckets struct {
	c redis.UniversalClient
}

// New returns Buckets over c. The script is loaded on first use (EVALSHA,
// falling back to EVAL on NOSCRIPT, after a restart or a failover).
func New(c redis.UniversalClient) *Buckets { return &Buckets{c: c} }

// Run applies ops in one pipelined round trip (one per shard on a cluster),
// in Order, and returns their outcomes in the call's order. Each op is
// one script call on one key: the ops of a batch are independent buckets,
// usually on different slots, so they cannot share a script call on a
// cluster.
//
// On an error no outcome is returned, yet some ops may have run (a
// connection lost after the scripts ran, a timeout): their tokens are
// taken and unused, an under-admission, never an over-admission. Ops are
// never sent twice, except those Redis refused without running them.
func (b *Buckets) Run(ctx context.Context, ops []Op) ([]Outcome, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if err := Check(ops); err != nil {
		return nil, err
	}
	order := Order(ops)
	sorted := ops // already in Order: buckets only, or one window per identity in start order
	if !slices.IsSorted(order) {
		sorted = make([]Op, len(ops))
		for k, i := range order {
			sorted[k] = ops[i]
		}
	}
	cmds, err := b.pipeline(ctx, sorted, false)
	if err != nil && notRun(err) {
		// Redis refused some ops without running them: NOSCRIPT (the script
		// cache is empty after a restart, a failover, SCRIPT FLUSH; EVAL
		// sends the source and caches it again), or a cluster redirect or
		// transient state. Only those ops go again, once; the others have
		// already been applied and must not be.
		if cmds, err = b.retryNotRun(ctx, sorted, cmds); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	out := make([]Outcome, len(ops))
	for k, i := range order {
		if out[i], err = decode(cmds[k], ops[i]); err != nil {
			return nil, fmt.Errorf("bucket %q: %w", ops[i].Key, err)
		}
	}
	return out, nil
}

func (b *Buckets) pipeline(ctx context.Context, ops []Op, eval bool) ([]*redis.Cmd, error) {
	pipe := b.c.Pipeline()
	cmds := make([]*redis.Cmd, len(ops))
	for i, op := range ops {
		sc, keys, args := opScript(op)
		if eval {
			cmds[i] = sc.Eval(ctx, pipe, keys, args...)
		} else {
			cmds[i] = sc.EvalSha(ctx, pipe, keys, args...)
		}
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

func (b *Buckets) retryNotRun(ctx context.Context, ops []Op, cmds []*redis.Cmd) ([]*redis.Cmd, error) {
	var again []Op
	var at []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			if !notRun(err) {
				return nil, err
			}
			again, at = append(again, ops[i]), append(at, i)
		}
	}
	redone, err := b.pipeline(ctx, again, true)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		cmds[i] = redone[j]
	}
	return cmds, nil
}

// Check refuses ops no script can run: a charge of a sliding or rolling
// window (only a bucket, a fixed window or a quota is charged), a block
// of anything but a bucket, or of a negative length. Both backends check
// a call before running any of it.
func Check(ops []Op) error {
	for _, op := range ops {
		if op.Charge && (op.Return || op.Counter && (op.Rolling || op.PrevKey != "")) {
			return fmt.Errorf("op on %q: a charge applies to a bucket, a fixed window or a quota, and is not a return", op.Key)
		}
		if op.Block < 0 || op.Block > 0 && (op.Counter || op.Return || op.Charge) {
			return fmt.Errorf("op on %q: a block applies to a bucket, for a positive time, and is neither a return nor a charge", op.Key)
		}
	}
	return nil
}

// opScript returns the script of op, its keys and arguments.
func opScript(op Op) (*redis.Script, []string, []any) {
	switch {
	case !op.Counter && op.Block > 0:
		return script, []string{op.Key}, []any{op.Amount, op.Tau, "block", op.Block}
	case !op.Counter:
		return script, []string{op.Key}, []any{op.Amount, op.Tau, bucketMode(op)}
	case op.Rolling:
		return rollingScript, []string{op.Key}, []any{op.Amount, op.Limit, op.MaxPerPeriod, op.FieldMS, op.OldestMS,
			op.ExpireAtMS, mode(op.Return)}
	case op.PrevKey != "" && !op.Return:
		return slidingScript, []string{op.Key, op.PrevKey}, []any{op.Amount, op.Limit, op.ExpireAtMS,
			op.NowMS, op.StartMS, max(op.LengthMS, 1)}
	}
	return windowScript, []string{op.Key}, []any{op.Amount, op.Limit, op.ExpireAtMS, bucketMode(op)}
}

// bucketMode is gcra.lua's ARGV[3] (window.lua's ARGV[4]) for op.
func bucketMode(op Op) string {
	if op.Charge {
		return "charge"
	}
	return mode(op.Return)
}

func mode(ret bool) string {
	if ret {
		return "return"
	}
	return "take"
}

// notRunPrefixes are the error replies with which Redis refuses a command
// without running it: safe to send again.
var notRunPrefixes = []string{"NOSCRIPT ", "MOVED ", "TRYAGAIN ", "CLUSTERDOWN ", "LOADING "}

// notRun reports whether err is a reply meaning the script did not run.
// Connection errors and timeouts are not: the script may have run.
func notRun(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, p := range notRunPrefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func decode(cmd *redis.Cmd, op Op) (Outcome, error) {
	vals, err := cmd.Int64Slice()
	if err != nil {
		return Outcome{}, err
	}
	want := 3
	if op.Charge {
		want = 4 // and what the charge added
	}
	if len(vals) != want {
		return Outcome{}, fmt.Errorf("script answered %d values, want %d", len(vals), want)
	}
	o := Outcome{Allowed: vals[0] == 1, Now: vals[2]}
	if op.Counter {
		o.Count = vals[1]
	} else {
		o.Backlog = vals[1]
	}
	if want == 4 {
		o.Charged = vals[3]
	}
	return o, nil
}

// Ping checks that Redis answers (every shard of a cluster).
func (b *Buckets) Ping(ctx context.Context) error {
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	}
	return b.c.Ping(ctx).Err()
}

// ErrNoAddrs is returned by NewClient without an address.
var ErrNoAddrs = errors.New("no Redis address")
