package filter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/state"
)

// groupPools decodes the pools of the group at key: the sluice_id and
// tokens of each way.
func groupPools(t *testing.T, f *fixture, key string) (ids []string, tokens []int64) {
	t.Helper()
	v, _, st := f.h.SharedData().Get(key)
	if st != wasmhost.StatusOK || !state.IsGroup(v) {
		t.Fatalf("%s: status %v, value %x: not a group", key, st, v)
	}
	var ways [state.Ways][]byte
	n, err := state.SplitGroup(v, &ways)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	for _, rec := range ways[:n] {
		s, err := state.DecodePool(rec)
		if err != nil {
			t.Fatalf("%s: way %x: %v", key, rec, err)
		}
		ids, tokens = append(ids, string(s.Identity)), append(tokens, s.Pool.Tokens)
	}
	return ids, tokens
}

// TestFleetPoolsShareAGroupAndEvictTheEmptiest: with max_keys 4 a global
// rule's pools live in one group key, four to it, one per identity; a
// fifth identity, every lease live, takes the way of the pool holding the
// fewest tokens and leaves the other three as they were.
func TestFleetPoolsShareAGroupAndEvictTheEmptiest(t *testing.T) {
	f := start(t, strings.Replace(fleetConfig("deny"), `"scope":"global",`, `"scope":"global","max_keys":4,`, 1), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lease := func(tenant string) string {
		res := f.do("x-tenant", tenant)
		calls := f.h.PendingCalls()
		if !res.Paused || len(calls) != 1 {
			t.Fatalf("%s: paused %v, %d calls; want one ask for a new pool", tenant, res.Paused, len(calls))
		}
		ids := grant(t, calls[0])
		if final, err := res.Stream.Complete(ctx, nil); err != nil || final.Rejected {
			t.Fatalf("%s: %+v %v", tenant, final, err)
		}
		return ids[0]
	}
	tenants := []string{"a", "b", "c", "d"}
	spends := map[string]int{"a": 0, "b": 3, "c": 1, "d": 5} // d's pool ends with the fewest tokens
	idOf := map[string]string{}
	for _, tenant := range tenants {
		idOf[tenant] = lease(tenant)
		for range spends[tenant] {
			if res := f.do("x-tenant", tenant); res.Paused || res.Rejected {
				t.Fatalf("%s: paused %v rejected %v on a fresh lease", tenant, res.Paused, res.Rejected)
			}
		}
	}
	const key = "fl:g:#0"
	ids, tokens := groupPools(t, f, key)
	if len(ids) != 4 {
		t.Fatalf("%s holds %d pools %v, want the four identities'", key, len(ids), ids)
	}
	victim := 0
	for i := range ids {
		if tokens[i] < tokens[victim] {
			victim = i
		}
	}
	if ids[victim] != idOf["d"] {
		t.Fatalf("the pool with the fewest tokens (%v) is %s, want d's %s", tokens, ids[victim], idOf["d"])
	}
	if _, _, st := f.h.SharedData().Get("fl:g:#1"); st != wasmhost.StatusNotFound {
		t.Fatalf("a second pool key fl:g:#1 for max_keys 4: %v", st)
	}

	e := lease("e")
	after, _ := groupPools(t, f, key)
	for i := range ids {
		want := ids[i]
		if i == victim {
			want = e
		}
		if after[i] != want {
			t.Fatalf("ways after e's claim %v, want %v with way %d replaced by e's %s", after, ids, victim, e)
		}
	}
}
