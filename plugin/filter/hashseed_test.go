package filter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/state"
)

// The hash key that places identities in groups differs per deployment
// (hashseed.go): two hosts (two shared-data stores, as two Envoy processes)
// create different keys and put the same identities in different groups;
// the VMs of one host agree on theirs; a reconfiguration keeps it.
func TestHashSeedPerDeployment(t *testing.T) {
	const maxKeys = 4096
	cfg := ipConfig(fmt.Sprint(maxKeys), 1, 10)
	hosts := make([]*wasmhost.Host, 2)
	keys := make([]state.HashKey, 2)
	for i := range hosts {
		h, err := wasmhost.New(context.Background(), wasmhost.Config{
			Wasm: pluginWasm(t), PluginConfig: []byte(cfg), VMs: 3, Clock: wasmhost.NewManualClock(t0),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		hosts[i] = h
		v, _, st := h.SharedData().Get("sluice:hash-seed")
		k, ok := state.HashKeyFrom(v)
		if st != wasmhost.StatusOK || !ok {
			t.Fatalf("host %d: no hash seed after start (%d, %x)", i, st, v)
		}
		keys[i] = k
	}
	if keys[0] == keys[1] {
		t.Fatalf("two deployments created the same key %x", keys[0])
	}
	// Every VM of a host places an identity where its host's key says,
	// unless its group is already full: then it shares a bucket (about
	// one run in 200 puts five of the 200 identities in one group).
	same := 0
	placed := []map[string]int{{}, {}} // per host, identities per group key
	for id := 0; id < 200; id++ {
		ip := ipOf(id)
		for i, h := range hosts {
			vm := id % 3
			if _, err := h.VM(vm).HTTP(context.Background(), ipRequest(id)); err != nil {
				t.Fatal(err)
			}
			fp := state.KeyedFingerprint(keys[i], ip)
			group := state.SlotKey("per-ip", state.GroupOf(fp, state.Groups(maxKeys)))
			placed[i][group]++
			found := false
			for _, w := range groupWays(t, h.SharedData(), group) {
				if s, err := state.DecodeSlot(w); err == nil && s.Fingerprint == fp && string(s.Identity) == ip {
					found = true
				}
			}
			if !found && placed[i][group] <= state.GroupWays(maxKeys) {
				t.Fatalf("host %d VM %d: %s not in its group under the host's key", i, vm, ip)
			}
		}
		g0 := state.GroupOf(state.KeyedFingerprint(keys[0], ip), state.Groups(maxKeys))
		g1 := state.GroupOf(state.KeyedFingerprint(keys[1], ip), state.Groups(maxKeys))
		if g0 == g1 {
			same++
		}
	}
	if same > 5 {
		t.Errorf("%d of 200 identities in the same group under both deployments' keys", same)
	}
	// A reconfiguration (new root contexts on the same VMs) keeps the key,
	// and so every bucket: the identity's bucket is found again.
	h := hosts[0]
	if err := h.Reconfigure(context.Background(), []byte(ipConfig(fmt.Sprint(maxKeys), 1, 20))); err != nil {
		t.Fatal(err)
	}
	v, _, _ := h.SharedData().Get("sluice:hash-seed")
	if k, _ := state.HashKeyFrom(v); k != keys[0] {
		t.Fatalf("key after reconfiguration %x, want %x", k, keys[0])
	}
	res, err := h.VM(1).HTTP(context.Background(), ipRequest(0))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := remainingField(res.ResponseHeaders); got != "8" {
		t.Errorf("after reconfiguration: remaining %q, want 8 (the bucket of before, 9, minus 1)", got)
	}
}

// VMs that start together on one shared-data store (one Envoy process)
// end up with one key: each creation or replacement is conditional (the
// sentinel cas, or the cas of the value read), and a VM whose write fails
// re-reads and adopts the stored key. Here the store starts with a value
// that is not a key and 30% of conditional writes fail as if another VM had
// written first. Checked by sending one identity from every VM at once:
// exactly one burst is admitted (VMs with different keys would place it in
// two groups, two buckets). (This host starts VMs one after the other, so
// two creations never truly interleave here; that case is the bucket
// store's create-if-absent, which TestRaceExactBurst races.)
func TestHashSeedConcurrentCreation(t *testing.T) {
	wasm := pluginWasm(t)
	for trial := 0; trial < 8; trial++ {
		sd := wasmhost.NewSharedData()
		hosts := make([]*wasmhost.Host, 4)
		var wg sync.WaitGroup
		for i := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := wasmhost.New(context.Background(), wasmhost.Config{
					Wasm: wasm, PluginConfig: []byte(ipConfig("64", 0.001, 100)), VMs: 1,
					Clock: wasmhost.NewManualClock(t0), SharedData: sd,
				})
				if err != nil {
					t.Error(err)
					return
				}
				hosts[i] = h
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		var mu sync.Mutex
		admitted := 0
		for _, h := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					res, err := h.VM(0).HTTP(context.Background(), ipRequest(7))
					if err != nil {
						t.Error(err)
						return
					}
					if !res.Rejected {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if admitted != 100 {
			t.Fatalf("trial %d: %d of 200 admitted, want exactly the burst, 100 (two keys?)", trial, admitted)
		}
		if keys, ids := ruleKeys(t, sd, "per-ip", 64); keys != 1 || ids != 1 {
			t.Fatalf("trial %d: %d keys holding %d identities, want one bucket", trial, keys, ids)
		}
		for _, h := range hosts {
			_ = h.Close(context.Background())
		}
	}
}

// A stored value that is not a key (another writer, a truncated value) is
// replaced by a new key, conditionally; if the key cannot be read at all,
// bounded rules fail open (counted), exact rules are unaffected, and the
// VM picks the key up once shared data works again.
func TestHashSeedUnreadable(t *testing.T) {
	sd := wasmhost.NewSharedData()
	sd.Set("sluice:hash-seed", []byte("not a key"), 0)
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm: pluginWasm(t), PluginConfig: []byte(ipConfig("", 1, 10)), VMs: 1, Clock: wasmhost.NewManualClock(t0), SharedData: sd,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	if v, _, _ := sd.Get("sluice:hash-seed"); len(v) != state.HashKeyLen {
		t.Fatalf("seed %q not replaced by a key", v)
	}

	clock := wasmhost.NewManualClock(t0)
	sd2 := wasmhost.NewSharedData()
	sd2.InjectFaults(wasmhost.Faults{GetFailRate: 1, Seed: 1})
	cfg := `{"policies": [
	  {"name": "pb", "rules": [{"name": "b", "limit_keys": ["header:x-id"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]},
	  {"name": "pe", "rules": [{"name": "e", "max_keys": 0, "limit_keys": ["header:x-id"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}]}`
	h2, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm: pluginWasm(t), PluginConfig: []byte(cfg), VMs: 1, Clock: clock, SharedData: sd2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h2.Close(context.Background()) })
	f := &fixture{t: t, h: h2, clock: clock}
	f.do("x-id", "a") // every get fails: both rules fail open
	sd2.InjectFaults(wasmhost.Faults{})
	clock.Advance(500e6) // within the retry interval: the bounded rule still fails open
	if r := f.do("x-id", "a"); r.Rejected {
		t.Fatal("rejected")
	}
	if n := f.metric("sluice.rule.b.fail_open"); n != 2 {
		t.Errorf("bounded rule fail_open = %d, want 2", n)
	}
	if n := f.metric("sluice.hash_seed_failed"); n < 1 {
		t.Errorf("hash_seed_failed = %d", n)
	}
	if n := f.metric("sluice.rule.e.fail_open"); n != 1 {
		t.Errorf("exact rule fail_open = %d, want 1 (the failing gets only)", n)
	}
	if n := f.metric("sluice.panics_recovered"); n != 0 {
		t.Errorf("panics_recovered = %d", n)
	}
	clock.Advance(1e9) // the next attempt reads (creates) the key
	f.do("x-id", "c")
	if n := f.metric("sluice.rule.b.fail_open"); n != 2 {
		t.Errorf("bounded rule fail_open = %d after shared data recovered, want still 2", n)
	}
	if keys, ids := ruleKeys(t, sd2, "b", 65536); keys != 1 || ids != 1 {
		t.Errorf("bounded rule: %d keys holding %d identities, want c's bucket", keys, ids)
	}
	if v, _, _ := sd2.Get("sluice:hash-seed"); len(v) != state.HashKeyLen {
		t.Errorf("seed %q", v)
	}
}
