package filter_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// Bounded memory (issue 4): a rule keeps its buckets in at most max_keys
// slots, whatever the number of distinct identities. These tests run the
// compiled filter in the Envoy-faithful host.

// ipConfig is seed 001's per-IP rule with a given max_keys ("" = default).
func ipConfig(maxKeys string, rps, burst float64) string {
	mk := ""
	if maxKeys != "" {
		mk = `"max_keys": ` + maxKeys + `, `
	}
	return fmt.Sprintf(`{"rules": [{"name": "per-ip", %s"limit_keys": ["ip:address"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": %g, "burst": %g}}]}`, mk, rps, burst)
}

// ipRequest is a request from the i-th distinct IPv4 address (10.0.0.0/8
// and up, one address per i).
func ipRequest(i int) *wasmhost.Request {
	ip := ipOf(i)
	return &wasmhost.Request{
		Headers:    []wasmhost.Header{{":path", "/"}},
		Properties: wasmhost.Properties{"source.address": []byte(ip + ":40000")},
	}
}

func ipOf(i int) string { return string(appendIP(nil, i)) }

// appendIP appends the i-th IPv4 address from 10.0.0.0.
func appendIP(dst []byte, i int) []byte {
	dst = strconv.AppendInt(dst, int64(10+i>>24), 10)
	for _, shift := range []int{16, 8, 0} {
		dst = append(dst, '.')
		dst = strconv.AppendInt(dst, int64(i>>shift&255), 10)
	}
	return dst
}

// ruleKeys counts the shared-data keys of a rule, and fails on any key of
// the rule that is not a slot key within [0, maxKeys).
func ruleKeys(t testing.TB, sd *wasmhost.SharedData, rule string, maxKeys int) int {
	t.Helper()
	n := 0
	for _, k := range sd.Keys() {
		r, slot, comp, ok := state.ParseKey(k)
		if !ok || r != rule {
			continue
		}
		if slot < 0 || slot >= maxKeys {
			t.Fatalf("key %q of rule %s is not a slot in [0, %d) (composite %q)", k, rule, maxKeys, comp)
		}
		n++
	}
	return n
}

// The acceptance test: 1,000,000 distinct ip:address identities
// through the compiled .wasm; the rule never has more than max_keys keys.
func TestBoundedMillionIdentities(t *testing.T) {
	total := 1_000_000
	if testing.Short() {
		total = 100_000
	}
	const maxKeys = policy.DefaultMaxKeys
	f := start(t, ipConfig("", 5, 10), 1) // default max_keys
	if got := f.maxKeys("per-ip"); got != maxKeys {
		t.Fatalf("default max_keys = %d", got)
	}
	sd := f.h.SharedData()
	ctx := context.Background()
	vm := f.h.VM(0)
	started := time.Now()
	for i := 0; i < total; i++ {
		// 20 us of (manual) time per request: 50k requests per simulated
		// second, so a bucket (5/s, burst 10) is full again 0.2 s = 10k
		// requests after its identity's only request.
		f.clock.Advance(20 * time.Microsecond)
		res, err := vm.HTTP(ctx, ipRequest(i))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if res.Rejected {
			t.Fatalf("request %d (a new identity) rejected", i)
		}
		if (i+1)%100_000 == 0 || i+1 == total {
			keys := ruleKeys(t, sd, "per-ip", maxKeys)
			if keys > maxKeys || sd.Len() > maxKeys+1 { // +1: the creation sentinel
				t.Fatalf("after %d identities: %d keys for the rule, %d in all; max_keys is %d", i+1, keys, sd.Len(), maxKeys)
			}
			t.Logf("%8d identities: %6d keys, %9d bytes of shared data (%.1f per key), evicted %d",
				i+1, keys, sd.Bytes(), float64(sd.Bytes())/float64(sd.Len()), f.metric("sluice.rule.per-ip.evicted"))
		}
	}
	if n := f.metric("sluice.rule.per-ip.allowed"); n != uint64(total) {
		t.Errorf("allowed = %d, want %d", n, total)
	}
	for _, m := range []string{"fail_open", "rejected"} {
		if n := f.metric("sluice.rule.per-ip." + m); n != 0 {
			t.Errorf("%s = %d", m, n)
		}
	}
	if n := f.metric("sluice.panics_recovered"); n != 0 {
		t.Errorf("panics_recovered = %d", n)
	}
	// The table fills up (keys were created until then) and stays flat.
	if keys := ruleKeys(t, sd, "per-ip", maxKeys); keys < maxKeys*9/10 {
		t.Errorf("only %d of %d slots used after %d identities", keys, maxKeys, total)
	}
	t.Logf("%d identities in %v; shared data: %d keys, %d bytes", total, time.Since(started).Round(time.Millisecond), sd.Len(), sd.Bytes())
}

// A client whose bucket is active keeps its exact state while 100,000
// other identities pass through a small table (max_keys 1024, frozen clock:
// every newcomer must evict once the table is full). Evictions take the
// fullest candidate, so the client's partly spent bucket is never chosen.
func TestBoundedActiveClientKeepsExactState(t *testing.T) {
	others := 100_000
	if testing.Short() {
		others = 20_000
	}
	const maxKeys = 1024
	f := start(t, ipConfig("1024", 0.001, 10), 1)
	client := 123_456_789
	for i := 0; i < 4; i++ {
		if res := f.doOn(0, ipRequest(client)); res.Rejected {
			t.Fatalf("client request %d rejected", i)
		}
	}
	before, ok := f.bucket("per-ip", ipOf(client))
	if !ok || before.Tokens != 6 {
		t.Fatalf("client bucket = %+v, %v; want 6 tokens", before, ok)
	}
	key, _ := f.bucketKey("per-ip", ipOf(client))
	contested := 0
	for i := 0; i < others; i++ {
		if res := f.doOn(0, ipRequest(i)); res.Rejected {
			t.Fatalf("identity %d rejected", i)
		}
		c := state.CandidateSlots(state.Fingerprint(ipOf(i)), maxKeys)
		if state.SlotKey("per-ip", c[0]) == key || state.SlotKey("per-ip", c[1]) == key {
			contested++
		}
	}
	after, ok := f.bucket("per-ip", ipOf(client))
	if !ok || after != before {
		t.Fatalf("client bucket after %d others = %+v, %v; want exactly %+v", others, after, ok, before)
	}
	if k, _ := f.bucketKey("per-ip", ipOf(client)); k != key {
		t.Errorf("client bucket moved from %s to %s", key, k)
	}
	if keys := ruleKeys(t, f.h.SharedData(), "per-ip", maxKeys); keys > maxKeys {
		t.Fatalf("%d keys > max_keys %d", keys, maxKeys)
	}
	evicted := f.metric("sluice.rule.per-ip.evicted")
	if evicted == 0 || contested == 0 {
		t.Fatalf("evicted = %d, newcomers contesting the client's slot = %d: the test exercised nothing", evicted, contested)
	}
	// The client continues from its exact state: 6 - 1 = 5 remaining.
	res := f.doOn(0, ipRequest(client))
	if got, _ := header(res.ResponseHeaders, "ratelimit-remaining"); res.Rejected || got != "5" {
		t.Fatalf("client's next request: rejected=%v remaining=%q, want 5", res.Rejected, got)
	}
	if logsContaining(f.h, wasmhost.LogLevelWarn, "more active identities than max_keys") == 0 {
		t.Error("evictions not logged")
	}
	t.Logf("%d others, %d contested the client's slot %s, %d evictions", others, contested, key, evicted)
}

// findIdentity returns an IP identity whose candidate slots (in a table of
// maxKeys) satisfy ok.
func findIdentity(t *testing.T, maxKeys int, ok func(c [state.Candidates]int) bool) int {
	t.Helper()
	return findIdentityFrom(t, 0, maxKeys, ok)
}

// findIdentityFrom is findIdentity among the identities from the from-th on.
func findIdentityFrom(t *testing.T, from, maxKeys int, ok func(c [state.Candidates]int) bool) int {
	t.Helper()
	for i := from; i < 1_000_000; i++ {
		if ok(state.CandidateSlots(state.Fingerprint(ipOf(i)), maxKeys)) {
			return i
		}
	}
	t.Fatal("no identity found")
	return 0
}

func slotValue(t *testing.T, f *fixture, rule string, slot int) state.Slot {
	t.Helper()
	v, _, st := f.h.SharedData().Get(state.SlotKey(rule, slot))
	if st != wasmhost.StatusOK {
		t.Fatalf("slot %d: status %d", slot, st)
	}
	s, err := state.DecodeSlot(v)
	if err != nil {
		t.Fatalf("slot %d: %v (%q)", slot, err, v)
	}
	return s
}

// An idle slot (its bucket has refilled to full) is taken over by a new
// identity without counting an eviction; an active one is evicted only when
// every candidate is active, fullest first.
func TestBoundedSlotReuseAndEviction(t *testing.T) {
	const maxKeys = 4
	f := start(t, ipConfig("4", 1, 10), 1)
	// A and C fill slots 0 and 1; B's candidates are exactly {0, 1}, in
	// that order.
	a := findIdentity(t, maxKeys, func(c [2]int) bool { return c[0] == 0 })
	cc := findIdentity(t, maxKeys, func(c [2]int) bool { return c[0] == 1 })
	b := findIdentity(t, maxKeys, func(c [2]int) bool { return c == [2]int{0, 1} })
	f.doOn(0, ipRequest(a)) // A: 9 tokens in slot 0
	for i := 0; i < 5; i++ {
		f.doOn(0, ipRequest(cc)) // C: 5 tokens in slot 1
	}
	if s := slotValue(t, f, "per-ip", 0); string(s.Identity) != ipOf(a) || s.Bucket.Tokens != 9 {
		t.Fatalf("slot 0 = %q %+v", s.Identity, s.Bucket)
	}
	if s := slotValue(t, f, "per-ip", 1); string(s.Identity) != ipOf(cc) || s.Bucket.Tokens != 5 {
		t.Fatalf("slot 1 = %q %+v", s.Identity, s.Bucket)
	}

	// Both active: B evicts the fuller one, A (9 > 5), and C keeps its state.
	f.do("@ip", ipOf(b)+":1")
	s0 := slotValue(t, f, "per-ip", 0)
	if string(s0.Identity) != ipOf(b) || s0.Fingerprint != state.Fingerprint(ipOf(b)) || s0.Bucket.Tokens != 9 {
		t.Fatalf("after B: slot 0 = %q %+v, want B with 9 tokens", s0.Identity, s0.Bucket)
	}
	if s := slotValue(t, f, "per-ip", 1); string(s.Identity) != ipOf(cc) || s.Bucket.Tokens != 5 {
		t.Fatalf("after B: slot 1 = %q %+v, want C untouched", s.Identity, s.Bucket)
	}
	if n := f.metric("sluice.rule.per-ip.evicted"); n != 1 {
		t.Fatalf("evicted = %d, want 1", n)
	}

	// Time passes: every bucket is full again (10 tokens at 1/s).
	f.clock.Advance(10 * time.Second)
	keysBefore := f.h.SharedData().Len()
	// A comes back: its candidate slot 0 holds B's full bucket, which A takes
	// over (or A's other candidate if that is free); no eviction counted.
	f.do("@ip", ipOf(a)+":1")
	k, ok := f.bucketKey("per-ip", ipOf(a))
	if !ok {
		t.Fatal("A has no bucket")
	}
	if got, _ := f.bucket("per-ip", ipOf(a)); got.Tokens != 9 {
		t.Errorf("A's new bucket has %v tokens, want 9 (a fresh bucket)", got.Tokens)
	}
	if n := f.metric("sluice.rule.per-ip.evicted"); n != 1 {
		t.Errorf("evicted = %d after reusing a full slot, want still 1", n)
	}
	if _, ok := f.bucket("per-ip", ipOf(b)); ok && k == state.SlotKey("per-ip", 0) {
		t.Error("B's bucket is still found after its slot was taken")
	}
	if got := ruleKeys(t, f.h.SharedData(), "per-ip", maxKeys); got > maxKeys || f.h.SharedData().Len() > keysBefore+1 {
		t.Errorf("%d rule keys, %d keys in all (before %d)", got, f.h.SharedData().Len(), keysBefore)
	}

	// The idle reuse, deterministically: B's first candidate (slot 0) is
	// full, its second (slot 1, C) is active; B must take slot 0.
	f2 := start(t, ipConfig("4", 1, 10), 1)
	f2.doOn(0, ipRequest(a)) // slot 0: A
	for i := 0; i < 3; i++ {
		f2.doOn(0, ipRequest(cc)) // slot 1: C, 7 tokens
	}
	f2.clock.Advance(1500 * time.Millisecond) // A full again (9+1.5 > 10), C at 8.5
	f2.do("@ip", ipOf(b)+":1")
	s0 = slotValue(t, f2, "per-ip", 0)
	if string(s0.Identity) != ipOf(b) || s0.Bucket.Tokens != 9 {
		t.Fatalf("idle slot 0 not reused by B: %q %+v", s0.Identity, s0.Bucket)
	}
	if s1 := slotValue(t, f2, "per-ip", 1); string(s1.Identity) != ipOf(cc) || s1.Bucket.Tokens != 7 {
		t.Fatalf("slot 1 = %q %+v, want C with its 7 tokens (as of its last request)", s1.Identity, s1.Bucket)
	}
	if n := f2.metric("sluice.rule.per-ip.evicted"); n != 0 {
		t.Errorf("reusing a full slot counted %d evictions", n)
	}
	// A comes back and finds no bucket: it starts a full one, as it would
	// have had anyway.
	res := f2.do("@ip", ipOf(a)+":1")
	if got, _ := header(res.ResponseHeaders, "ratelimit-remaining"); got != "9" {
		t.Errorf("A after losing its idle slot: remaining %q, want 9", got)
	}
}

// The storage formats of both modes, side by side.
func TestStorageFormats(t *testing.T) {
	const cfg = `{"rules": [
	  {"name": "exact", "max_keys": 0, "limit_keys": ["header:x-a"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 10}},
	  {"name": "slots", "limit_keys": ["header:x-b"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 10}}
	]}`
	f := start(t, cfg, 1)
	f.do("x-a", "key:1")
	f.do("x-b", "key:2")
	now := float64(t0.Unix())
	v, _, st := f.h.SharedData().Get("tb:exact:key:1")
	if st != wasmhost.StatusOK || string(v) != fmt.Sprintf("9.000000:%.6f", now) {
		t.Errorf("exact key: %q (status %d)", v, st)
	}
	key, ok := f.bucketKey("slots", "key:2")
	if !ok {
		t.Fatalf("no slot for key:2; keys %v", f.h.SharedData().Keys())
	}
	v, _, _ = f.h.SharedData().Get(key)
	want := state.EncodeSlot(nil, state.Fingerprint("key:2"), state.Bucket{Tokens: 9, LastRefill: now}, "key:2")
	if string(v) != string(want) || v[0] != state.SlotFormat || string(v[len(v)-5:]) != "key:2" {
		t.Errorf("slot value %x, want %x (binary, the identity last)", v, want)
	}
	c := state.CandidateSlots(state.Fingerprint("key:2"), policy.DefaultMaxKeys)
	if key != state.SlotKey("slots", c[0]) {
		t.Errorf("a fresh identity in an empty table went to %s, want its first candidate %d", key, c[0])
	}
	if keys := f.h.SharedData().Keys(); len(keys) != 3 { // + the creation sentinel
		t.Errorf("keys %v", keys)
	}
}

// raceClock's realtime advances by step at every read (the filter reads it
// once per request, the host once per stream), so concurrent requests see
// different times. While armed, reads are paired: a read waits (up to 2 ms)
// for the next one and both return together, so two VMs that read
// consecutive times start their probes at the same moment. Its monotonic
// clock is the real one.
type raceClock struct {
	base  time.Time
	step  time.Duration
	n     atomic.Int64
	start time.Time

	mu      sync.Mutex
	armed   int           // reads still to pair in this trial
	waiting chan struct{} // a read waiting for its partner
	// between, when set, runs in the second read of each pair after the
	// first read was released and before the second returns.
	between func()
}

func (c *raceClock) Now() time.Time {
	v := c.base.Add(time.Duration(c.n.Add(1)) * c.step)
	c.mu.Lock()
	if c.armed <= 0 {
		c.mu.Unlock()
		return v
	}
	c.armed--
	if ch := c.waiting; ch != nil {
		c.waiting = nil
		between := c.between
		c.mu.Unlock()
		close(ch)
		if between != nil {
			between()
		}
		return v
	}
	ch := make(chan struct{})
	c.waiting = ch
	c.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(2 * time.Millisecond):
		c.mu.Lock()
		if c.waiting == ch {
			c.waiting = nil
		}
		c.mu.Unlock()
	}
	return v
}

// reads returns the number of reads so far: the next read returns
// base + (reads+1)*step.
func (c *raceClock) reads() int64 { return c.n.Load() }

func (c *raceClock) arm(n int, between func()) {
	c.mu.Lock()
	c.armed, c.between = n, between
	c.mu.Unlock()
}

func (c *raceClock) Monotonic() time.Duration { return time.Since(c.start) }

// Claims of one new identity by racing VMs that disagree about which
// candidate to take must still create one bucket. Each trial starts a fresh
// identity X (burst 100, 4 VMs, 1000 requests, max_keys 2, so X's
// candidates are slots 0 and 1).
//
//   - "clock": X's first candidate holds a bucket of Y that becomes full
//     between two clock reads, its second a full bucket of Z. Judged at
//     each VM's own clock, early VMs would take the second slot and later
//     ones the first; the filter ranks candidates at a time taken from the
//     values read (store.go, probe), so all VMs choose alike. (Ranked at
//     each VM's own clock, their claims kept invalidating each other until
//     some ran out of CAS retries and failed open: 101-102 admitted.)
//   - "writer": while the VMs race, Y's owner (the test, with CAS, as a
//     worker would) flips Y's bucket between nearly empty and full. A VM
//     that read Y empty evicts Z (slot 1, half full), one that read Y full
//     reuses slot 0. Only the claim protocol's rewrite of every candidate
//     read ("bumps", store.go) keeps both claims from succeeding.
//
// The clock releases consecutive reads together so that VMs probe
// concurrently. Without bumps, "writer" admits more than the burst within
// a few hundred trials (checked by hand: disable the bump loop in
// store.go).
func TestRaceClaimNoDuplicate(t *testing.T) {
	const (
		maxKeys = 2
		burst   = 100.0
		rate    = 0.001
		step    = 2 * time.Millisecond // 2e-6 tokens per clock read at this rate
	)
	for _, mode := range []string{"clock", "writer"} {
		t.Run(mode, func(t *testing.T) {
			clock := &raceClock{base: t0, step: step, start: time.Now()}
			h, err := wasmhost.New(context.Background(), wasmhost.Config{
				Wasm:  pluginWasm(t),
				VMs:   4,
				Clock: clock,
				PluginConfig: []byte(fmt.Sprintf(`{"rules": [{"name": "race", "max_keys": %d, "limit_keys": ["header:x-api-key"],
				  "algorithm": "token_bucket", "algorithm_config": {"rps": %g, "burst": %g}}]}`, maxKeys, rate, burst)),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close(context.Background()) })
			f := &fixture{t: t, h: h}
			trials := 400
			if testing.Short() {
				trials = 60
			}
			sd := h.SharedData()
			yfp, zfp := state.Fingerprint("y"), state.Fingerprint("z")
			for trial := 0; trial < trials; trial++ {
				x := fmt.Sprintf("x-%d", trial)
				c := state.CandidateSlots(state.Fingerprint(x), maxKeys)
				y0, y1 := state.SlotKey("race", c[0]), state.SlotKey("race", c[1])
				r0 := clock.reads()
				last := float64(t0.Add(time.Duration(r0)*step).UnixNano()) / 1e9
				var between func()
				if mode == "clock" {
					// Y is full from read number r0 + k + 0.5 on.
					k := 1 + trial%8
					deficit := (float64(k) + 0.5) * step.Seconds() * rate
					sd.Set(y0, state.EncodeSlot(nil, yfp, state.Bucket{Tokens: burst - deficit, LastRefill: last}, "y"), 0)
					sd.Set(y1, state.EncodeSlot(nil, zfp, state.Bucket{Tokens: burst, LastRefill: last}, "z"), 0)
				} else {
					yLow := state.Bucket{Tokens: 1, LastRefill: last}
					yFull := state.Bucket{Tokens: burst, LastRefill: last}
					sd.Set(y0, state.EncodeSlot(nil, yfp, yLow, "y"), 0)
					sd.Set(y1, state.EncodeSlot(nil, zfp, state.Bucket{Tokens: burst / 2, LastRefill: last}, "z"), 0)
					// Y's owner flips Y (with CAS, while the slot is Y's)
					// just after the first VM of a pair was released and
					// before the second goes: the two probe on either side
					// of the flip.
					delay := time.Duration(trial%5) * 500 * time.Nanosecond
					between = func() {
						spin(delay)
						v, cas, st := sd.Get(y0)
						if st != wasmhost.StatusOK {
							return
						}
						s, err := state.DecodeSlot(v)
						if err != nil || string(s.Identity) != "y" {
							return // X took the slot
						}
						next := yFull
						if s.Bucket == yFull {
							next = yLow
						}
						// Like the plugin, Y's owner keeps the slot's
						// spill mark (X may have set it, spilling to
						// slot 1).
						sd.Set(y0, state.EncodeMarkedSlot(nil, yfp, next, "y", s.SpillUntil), cas)
					}
				}
				clock.arm(16, between)
				got := race(t, f, 4, 250, rq("x-api-key", x))
				if got != int(burst) {
					v0, _, _ := sd.Get(y0)
					v1, _, _ := sd.Get(y1)
					fo, _ := h.Metric("sluice.rule.race.fail_open")
					t.Fatalf("trial %d: %d of 1000 admitted, want exactly %d (two buckets for one identity?); fail_open %d; slots %q, %q",
						trial, got, int(burst), fo, v0, v1)
				}
			}
			if n, _ := h.Metric("sluice.rule.race.fail_open"); n != 0 {
				t.Errorf("fail_open = %d", n)
			}
			retries, _ := h.Metric("sluice.rule.race.cas_retries")
			evicted, _ := h.Metric("sluice.rule.race.evicted")
			t.Logf("%d trials, cas_retries=%d, evicted=%d", trials, retries, evicted)
		})
	}
}

// spin busy-waits for d (time.Sleep is far coarser than microseconds).
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// One-read claims and spill marks (store.go): a new identity whose first
// candidate holds a full bucket claims it after one read, unless the slot
// carries a live spill mark, which says that an identity whose first
// candidate it is may have an active bucket in its second one. This test
// walks an identity X through spilling to its second candidate and shows
// that it keeps its exact state there after its first candidate has become
// reusable (without the mark X would start a fresh, full bucket there: burst
// minus its tokens admitted for free).
func TestSpillMarkKeepsSecondCandidate(t *testing.T) {
	const maxKeys = 4
	f := start(t, ipConfig("4", 1, 10), 1)
	sd := f.h.SharedData()
	y := findIdentity(t, maxKeys, func(c [2]int) bool { return c[0] == 0 })
	x := findIdentity(t, maxKeys, func(c [2]int) bool { return c == [2]int{0, 1} })
	w := findIdentityFrom(t, max(x, y)+1, maxKeys, func(c [2]int) bool { return c[0] == 0 })
	if y == x || w == x || w == y {
		t.Fatalf("identities %d %d %d not distinct", y, x, w)
	}
	f.doOn(0, ipRequest(y)) // slot 0: Y, 9 tokens, full again in 1 s
	t0 := float64(f.clock.Now().UnixNano()) / 1e9
	for i := 0; i < 6; i++ {
		f.doOn(0, ipRequest(x)) // slot 0 is active: X lives in slot 1
	}
	if s := slotValue(t, f, "per-ip", 1); string(s.Identity) != ipOf(x) || s.Bucket.Tokens != 4 {
		t.Fatalf("slot 1 = %q %+v, want X with 4 tokens", s.Identity, s.Bucket)
	}
	s0 := slotValue(t, f, "per-ip", 0)
	if string(s0.Identity) != ipOf(y) || s0.Bucket.Tokens != 9 {
		t.Fatalf("slot 0 = %q %+v, want Y's bucket untouched", s0.Identity, s0.Bucket)
	}
	// The mark covers X's bucket until it is full (t0+6) with a margin: it
	// is raised to twice the horizon needed, at X's first request (t0 + 2 *
	// 1 s) and then whenever X's full time passes it.
	if s0.SpillUntil < t0+6 || s0.SpillUntil > t0+12+2e-6 {
		t.Fatalf("slot 0 spill mark %.6f, want between X's full time %.6f and twice its horizon", s0.SpillUntil, t0+6)
	}

	// 2 s later Y's bucket is full (slot 0 reusable), X's is at 6 of 10.
	f.clock.Advance(2 * time.Second)
	res := f.doOn(0, ipRequest(x))
	if got, _ := header(res.ResponseHeaders, "ratelimit-remaining"); got != "5" {
		t.Fatalf("X after its first candidate became reusable: remaining %q, want 5 (its own bucket)", got)
	}
	if s := slotValue(t, f, "per-ip", 0); string(s.Identity) != ipOf(y) || s.SpillUntil < t0+2+5 {
		t.Fatalf("slot 0 = %q, mark %.6f: want Y's and a mark covering X's new full time %.6f", s.Identity, s.SpillUntil, t0+7)
	}

	// 20 s later every bucket is full and the mark has expired: a new
	// identity W claims slot 0 after reading it alone (slot 1 is not even
	// rewritten) and keeps the slot's mark.
	f.clock.Advance(20 * time.Second)
	_, cas1, _ := sd.Get(state.SlotKey("per-ip", 1))
	mark := slotValue(t, f, "per-ip", 0).SpillUntil
	f.doOn(0, ipRequest(w))
	s0 = slotValue(t, f, "per-ip", 0)
	if string(s0.Identity) != ipOf(w) || s0.Bucket.Tokens != 9 || s0.SpillUntil != mark {
		t.Fatalf("slot 0 = %q %+v mark %.6f, want W with 9 tokens and the mark %.6f kept", s0.Identity, s0.Bucket, s0.SpillUntil, mark)
	}
	if _, cas, _ := sd.Get(state.SlotKey("per-ip", 1)); cas != cas1 {
		t.Errorf("a one-read claim rewrote the second candidate (cas %d -> %d)", cas1, cas)
	}
	if n := f.metric("sluice.rule.per-ip.evicted"); n != 0 {
		t.Errorf("evicted = %d, want 0", n)
	}
}

// A slot written by an earlier version, in the text form, keeps its bucket
// across the upgrade: the next request continues from it and rewrites the
// slot in the binary form.
func TestTextSlotFromEarlierVersion(t *testing.T) {
	f := start(t, `{"rules": [{"name": "slots", "limit_keys": ["header:x-b"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 10}}]}`, 1)
	fp := state.Fingerprint("key:3")
	key := state.SlotKey("slots", state.CandidateSlots(fp, policy.DefaultMaxKeys)[0])
	text := fmt.Sprintf("%s:4.000000:%.6f:key:3", state.AppendHex16(nil, fp), float64(t0.Unix()))
	f.h.SharedData().Set(key, []byte(text), 0)
	res := f.do("x-b", "key:3")
	if got, _ := header(res.ResponseHeaders, "ratelimit-remaining"); got != "3" {
		t.Fatalf("remaining %q, want 3 (the text slot's 4 tokens, minus 1)", got)
	}
	v, _, _ := f.h.SharedData().Get(key)
	s, err := state.DecodeSlot(v)
	if err != nil || v[0] != state.SlotFormat || s.Bucket.Tokens != 3 || string(s.Identity) != "key:3" {
		t.Fatalf("slot after the request: %x (%+v, %v), want binary with 3 tokens", v, s, err)
	}
}
