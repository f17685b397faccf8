package redisgcra_test

import (
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// Order keeps bucket ops in the call's order, first, and puts one
// identity's windows in the order of their starts, keeping the call's order
// within one window: a return to the previous window goes before a take of
// the current one, wherever the call placed it.
func TestOrderAppliesAnIdentitysWindowsInTheOrderOfTheirStarts(t *testing.T) {
	win := func(id string, start int64, ret bool) redisgcra.Op {
		return redisgcra.Op{Key: redisgcra.WindowKey("sluice", "w", id, start), StartMS: start, Counter: true, Amount: 1, Limit: 5, Return: ret}
	}
	roll := func(id string, field int64, ret bool) redisgcra.Op {
		return redisgcra.Op{Key: redisgcra.RollingKey("sluice", "r", id), Counter: true, Rolling: true, FieldMS: field, OldestMS: 0, Amount: 1, Limit: 5, Return: ret}
	}
	bucket := func(id string) redisgcra.Op {
		return redisgcra.Op{Key: redisgcra.Key("sluice", "b", id), Amount: 1, Tau: 10}
	}
	ops := []redisgcra.Op{
		win("a", 2000, false),  // 0: a take in a's current window
		bucket("x"),            // 1
		roll("a", 3000, false), // 2: a rolling take in the current sub-period
		win("a", 1000, true),   // 3: a return to a's previous window
		bucket("y"),            // 4
		roll("a", 2000, true),  // 5: a return to an earlier sub-period
		win("a", 2000, true),   // 6: a return to the current window, after the take
		win("b", 1000, false),  // 7: another identity
	}
	got := redisgcra.Order(ops)
	idOf := func(i int) string { return ops[i].Identity() }
	if got[0] != 1 || got[1] != 4 {
		t.Errorf("Order = %v: want the bucket ops 1 and 4 first, in the call's order", got)
	}
	pos := map[int]int{}
	for k, i := range got {
		pos[i] = k
	}
	for _, before := range [][2]int{{3, 0}, {0, 6}, {5, 2}} {
		if pos[before[0]] > pos[before[1]] {
			t.Errorf("Order = %v: op %d (%s, start %d) must apply before op %d (start %d)", got, before[0], idOf(before[0]), ops[before[0]].WindowStart(), before[1], ops[before[1]].WindowStart())
		}
	}
	sorted := slices.Sorted(slices.Values(got))
	if !slices.Equal(sorted, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("Order = %v: not a permutation of the ops", got)
	}
	if id, want := ops[0].Identity(), redisgcra.Key("sluice", "w", "a"); id != want {
		t.Errorf("a window counter's Identity = %q, want its bucket key %q", id, want)
	}
}

// BenchmarkOrder is Order of a 32-descriptor call of window counters, the
// admin's largest batch.
func BenchmarkOrder(b *testing.B) {
	ops := make([]redisgcra.Op, 32)
	for i := range ops {
		start := int64(1_800_000_000_000 + 60_000*(i%2))
		ops[i] = redisgcra.Op{Key: redisgcra.WindowKey("sluice", "api", string(rune('a'+i%16)), start), StartMS: start, Counter: true, Amount: 1, Limit: 10}
	}
	b.ReportAllocs()
	for b.Loop() {
		redisgcra.Order(ops)
	}
}
