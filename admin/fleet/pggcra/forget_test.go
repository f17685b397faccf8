package pggcra_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// ForgetRule deletes the buckets and window rows of every identity of one
// rule and nothing else: not a rule whose name starts with the rule's,
// not one LIKE would match ("_" is its one-character wildcard), not the
// rule in another domain.
func TestForgetRuleDeletesEveryRowOfTheRuleAndNoOther(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	b := open(t, pg.URL)
	ctx := context.Background()
	const startMS, expireMS = 1_700_000_000_000, 4_000_000_000_000
	tau := redisgcra.Limit{Rate: 0.001, Burst: 3}.Tau()
	ops := func(domain, rule string, ids int) []redisgcra.Op {
		var out []redisgcra.Op
		for i := range ids {
			id := fmt.Sprint("id-", i)
			out = append(out,
				redisgcra.Op{Key: redisgcra.Key(domain, rule, id), Amount: tau / 3, Tau: tau},
				redisgcra.Op{Key: redisgcra.WindowKey(domain, rule, id, startMS), StartMS: startMS, Counter: true, Amount: 1, Limit: 5, ExpireAtMS: expireMS},
				redisgcra.Op{Key: redisgcra.RollingKey(domain, rule, id), Counter: true, Rolling: true, FieldMS: startMS, OldestMS: startMS, Amount: 1, Limit: 5, ExpireAtMS: expireMS})
		}
		return out
	}
	run := func(ops []redisgcra.Op) {
		t.Helper()
		for len(ops) > 0 {
			n := min(len(ops), 300)
			if _, err := b.Run(ctx, ops[:n]); err != nil {
				t.Fatal(err)
			}
			ops = ops[n:]
		}
	}
	count := func() (buckets, windows int) {
		t.Helper()
		if err := b.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM sluice_fleet_buckets), (SELECT count(*) FROM sluice_fleet_windows)`).Scan(&buckets, &windows); err != nil {
			t.Fatal(err)
		}
		return buckets, windows
	}
	run(ops("sluice", "per_key", 200))
	for _, other := range [][2]string{{"sluice", "per_key2"}, {"sluice", "perXkey"}, {"other", "per_key"}, {"sluice", "per"}} {
		run(ops(other[0], other[1], 10))
	}
	b0, w0 := count()
	if b0 != 240 || w0 != 480 {
		t.Fatalf("%d buckets and %d window rows written, want 240 and 480", b0, w0)
	}
	n, err := b.ForgetRule(ctx, redisgcra.RulePrefix("sluice", "per_key"))
	if err != nil || n != 600 {
		t.Fatalf("ForgetRule = %d, %v; want the rule's 200 buckets and 400 window rows", n, err)
	}
	if b1, w1 := count(); b1 != 40 || w1 != 80 {
		t.Errorf("%d buckets and %d window rows left, want the other rules' 40 and 80", b1, w1)
	}
	var left int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM sluice_fleet_buckets WHERE key LIKE '%per\_key%' AND key NOT LIKE '%per\_key2%' AND key NOT LIKE '%5.other%'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d buckets of the rule left (%v)", left, err)
	}
}
