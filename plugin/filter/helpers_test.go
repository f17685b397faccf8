package filter_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// These tests run the COMPILED filter (./plugin built for wasip1/wasm) in
// plugin/wasmhost, the Envoy-faithful host, with a manual clock.

var t0 = time.Unix(1_700_000_000, 0)

type fixture struct {
	t     testing.TB
	h     *wasmhost.Host
	clock *wasmhost.ManualClock
	cfg   *policy.Config // the starting configuration, parsed (max_keys per rule)
}

func pluginWasm(t testing.TB) []byte {
	t.Helper()
	return wasmtest.Build(t, "./plugin")
}

// start runs the filter with config on vms VMs.
func start(t testing.TB, config string, vms int) *fixture {
	t.Helper()
	f, err := tryStart(t, config, vms)
	if err != nil {
		t.Fatalf("wasmhost.New: %v", err)
	}
	return f
}

func tryStart(t testing.TB, config string, vms int) (*fixture, error) {
	t.Helper()
	clock := wasmhost.NewManualClock(t0)
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm:         pluginWasm(t),
		PluginConfig: []byte(config),
		VMs:          vms,
		Clock:        clock,
		SharedData:   seededSharedData(),
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	cfg, _ := policy.Parse([]byte(config))
	return &fixture{t: t, h: h, clock: clock, cfg: cfg}, nil
}

// rq builds a request from name/value pairs. The pseudo name "@ip" sets the
// source.address property (default "10.0.0.1:5555").
func rq(kv ...string) *wasmhost.Request {
	r := &wasmhost.Request{Properties: wasmhost.Properties{"source.address": []byte("10.0.0.1:5555")}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "@ip" {
			r.Properties["source.address"] = []byte(kv[i+1])
			continue
		}
		r.Headers = append(r.Headers, wasmhost.Header{kv[i], kv[i+1]})
	}
	if !hasHeader(r.Headers, ":path") {
		r.Headers = append(r.Headers, wasmhost.Header{":path", "/"})
	}
	return r
}

func hasHeader(hs []wasmhost.Header, name string) bool {
	for _, h := range hs {
		if h[0] == name {
			return true
		}
	}
	return false
}

// do sends a full stream on VM 0 and fails the test on a host error (a trap).
func (f *fixture) do(kv ...string) *wasmhost.Result {
	f.t.Helper()
	return f.doOn(0, rq(kv...))
}

func (f *fixture) doOn(vm int, r *wasmhost.Request) *wasmhost.Result {
	f.t.Helper()
	res, err := f.h.VM(vm).HTTP(context.Background(), r)
	if err != nil {
		var trap *wasmhost.TrapError
		if errors.As(err, &trap) {
			f.t.Fatalf("guest trapped in %s: %v", trap.Callback, err)
		}
		f.t.Fatalf("HTTP: %v", err)
	}
	return res
}

// admitted sends n identical requests and returns how many were allowed.
func (f *fixture) admitted(n int, kv ...string) int {
	f.t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		if !f.do(kv...).Rejected {
			ok++
		}
	}
	return ok
}

func (f *fixture) metric(name string) uint64 {
	v, _ := f.h.Metric(name)
	return v
}

// maxKeys is a rule's max_keys in the starting configuration (the default
// for a rule added later).
func (f *fixture) maxKeys(rule string) int {
	if r := f.cfg.RuleByName(rule); r != nil {
		return r.MaxKeys
	}
	return policy.DefaultMaxKeys
}

// stateKey returns the key where the bucket of (rule, composite) lives:
// the exact key (max_keys 0), or the identity's group.
func (f *fixture) stateKey(rule, composite string) string {
	n := f.maxKeys(rule)
	if n == 0 {
		return state.BucketKey(rule, composite)
	}
	return state.SlotKey(rule, groupOf(composite, n))
}

// testHashKey is the hash key the tests' hosts start with (seededSharedData),
// so that tests can compute identities' fingerprints and groups; the VMs
// adopt it as a deployment's key (hashseed_test.go tests creating one).
var testHashKey = state.HashKey{K0: 0x0123456789abcdef, K1: 0xfedcba9876543210}

// testFP is an identity's fingerprint under testHashKey.
func testFP(identity string) uint64 { return state.KeyedFingerprint(testHashKey, identity) }

// seededSharedData returns a new shared-data store holding testHashKey.
func seededSharedData() *wasmhost.SharedData {
	sd := wasmhost.NewSharedData()
	sd.Set("sluice:hash-seed", state.AppendHashKey(nil, testHashKey), 0)
	return sd
}

// groupOf is the group of an identity in a table for maxKeys identities.
func groupOf(composite string, maxKeys int) int {
	return state.GroupOf(testFP(composite), state.Groups(maxKeys))
}

// groupWays reads the ways of a group key (none when it is missing).
func groupWays(t testing.TB, sd *wasmhost.SharedData, key string) [][]byte {
	t.Helper()
	v, _, st := sd.Get(key)
	if st == wasmhost.StatusNotFound {
		return nil
	}
	if st != wasmhost.StatusOK {
		t.Fatalf("shared data get %s: status %d", key, st)
	}
	var ways [state.Ways][]byte
	n, err := state.SplitGroup(v, &ways)
	if err != nil {
		t.Fatalf("group %s: %v (%x)", key, err, v)
	}
	return ways[:n]
}

// findWay returns the way of the group at key that holds identity's slot.
func findWay(t testing.TB, sd *wasmhost.SharedData, key, identity string) (int, state.Slot, bool) {
	t.Helper()
	fp := testFP(identity)
	for i, w := range groupWays(t, sd, key) {
		if s, err := state.DecodeSlot(w); err == nil && s.Fingerprint == fp && string(s.Identity) == identity {
			return i, s, true
		}
	}
	return -1, state.Slot{}, false
}

// bucketKey finds the key holding the bucket of (rule, composite), as the
// filter finds it: the exact key, or the group whose ways hold a slot with
// the identity's fingerprint and identity.
func (f *fixture) bucketKey(rule, composite string) (string, bool) {
	f.t.Helper()
	key := f.stateKey(rule, composite)
	if f.maxKeys(rule) == 0 {
		_, _, st := f.h.SharedData().Get(key)
		return key, st == wasmhost.StatusOK
	}
	_, _, ok := findWay(f.t, f.h.SharedData(), key, composite)
	return key, ok
}

// bucket reads a bucket from shared data, wherever the storage mode of the
// rule puts it.
func (f *fixture) bucket(rule, composite string) (state.Bucket, bool) {
	f.t.Helper()
	key := f.stateKey(rule, composite)
	if f.maxKeys(rule) > 0 {
		_, s, ok := findWay(f.t, f.h.SharedData(), key, composite)
		return s.Bucket, ok
	}
	v, _, st := f.h.SharedData().Get(key)
	if st == wasmhost.StatusNotFound {
		return state.Bucket{}, false
	}
	if st != wasmhost.StatusOK {
		f.t.Fatalf("shared data get: status %d", st)
	}
	b, err := state.DecodeBucket(v)
	if err != nil {
		f.t.Fatalf("bucket %s/%s: %v (%q)", rule, composite, err, v)
	}
	return b, true
}

// putBucket stores a bucket for (rule, composite) where the filter looks
// (the exact key, or a group holding that bucket alone).
func (f *fixture) putBucket(rule, composite string, b state.Bucket) {
	f.t.Helper()
	key := f.stateKey(rule, composite)
	v := state.EncodeBucket(nil, b)
	if f.maxKeys(rule) > 0 {
		v = state.AppendGroup(nil, nil, 0, state.EncodeSlot(nil, testFP(composite), b, composite))
	}
	if st := f.h.SharedData().Set(key, v, 0); st != wasmhost.StatusOK {
		f.t.Fatalf("set %s: status %d", key, st)
	}
}

func (f *fixture) tokens(rule, composite string) float64 {
	f.t.Helper()
	b, ok := f.bucket(rule, composite)
	if !ok {
		f.t.Fatalf("bucket %s/%s does not exist", rule, composite)
	}
	return b.Tokens
}

func header(hs []wasmhost.Header, name string) (string, bool) {
	for _, h := range hs {
		if h[0] == name {
			return h[1], true
		}
	}
	return "", false
}

func headerCount(hs []wasmhost.Header, name string) int {
	n := 0
	for _, h := range hs {
		if h[0] == name {
			n++
		}
	}
	return n
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not an integer: %q", s)
	}
	return n
}

func logsContaining(h *wasmhost.Host, level wasmhost.LogLevel, sub string) int {
	n := 0
	for _, e := range h.LogsAtLeast(level) {
		if strings.Contains(e.Message, sub) {
			n++
		}
	}
	return n
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// remainingField returns r, the whole tokens left, from the draft-10
// RateLimit field ("<rule>";r=<remaining>;t=<seconds>); ok is false when the
// field or its r parameter is absent.
func remainingField(hs []wasmhost.Header) (string, bool) {
	v, ok := header(hs, "ratelimit")
	if !ok {
		return "", false
	}
	_, r, ok := strings.Cut(v, ";r=")
	if !ok {
		return "", false
	}
	r, _, _ = strings.Cut(r, ";")
	return r, true
}
