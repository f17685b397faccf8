package xds

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/policy"
)

const compact = `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":3}}]}`

func TestComposeAppendsTheResetsAsTheLastMember(t *testing.T) {
	rs := []Reset{{ID: "a1", Rule: "per-ip", Key: "10.0.0.1"}, {ID: "a2", Rule: "per-ip", Key: "10.0.0.2"}}
	got, suffix := Compose([]byte(compact), rs)
	want := strings.TrimSuffix(compact, "}") +
		`,"resets":[{"id":"a1","rule":"per-ip","key":"10.0.0.1"},{"id":"a2","rule":"per-ip","key":"10.0.0.2"}]}`
	if string(got) != want {
		t.Errorf("composed\n%s\nwant\n%s", got, want)
	}
	if !strings.HasPrefix(suffix, "+resets.") || len(suffix) != len("+resets.")+8 {
		t.Errorf("suffix %q, want +resets.<8 hex digits>", suffix)
	}
	cfg, err := policy.Parse(got)
	if err != nil || len(cfg.Resets) != 2 || cfg.Resets[1].Key != "10.0.0.2" {
		t.Errorf("the filter's parser reads %+v, %v", cfg, err)
	}
	if _, other := Compose([]byte(compact), rs[:1]); other == suffix {
		t.Error("two sets of resets have the same version suffix")
	}
	if again, same := Compose([]byte(compact), rs); string(again) != want || same != suffix {
		t.Error("composing the same resets twice gave other bytes or another suffix")
	}
}

func TestComposeWithoutResetsLeavesTheBytesAlone(t *testing.T) {
	for _, rs := range [][]Reset{nil, {}} {
		if got, suffix := Compose([]byte(compact), rs); string(got) != compact || suffix != "" {
			t.Errorf("Compose(%v) = %s, %q; want the configuration unchanged", rs, got, suffix)
		}
	}
}

// A reset the configuration no longer accepts (its rule was removed, or
// has other limit keys now) is left out rather than pushed to be refused.
func TestComposeLeavesOutResetsTheConfigurationRefuses(t *testing.T) {
	rs := []Reset{
		{ID: "gone", Rule: "removed-rule", Key: "x"},
		{ID: "ok", Rule: "per-ip", Key: "10.0.0.1"},
		{ID: "twokeys", Rule: "per-ip", Key: "10.0.0.1|extra"},
	}
	got, suffix := Compose([]byte(compact), rs)
	want := strings.TrimSuffix(compact, "}") + `,"resets":[{"id":"ok","rule":"per-ip","key":"10.0.0.1"}]}`
	if string(got) != want || suffix == "" {
		t.Errorf("composed %s (%q), want only the reset the rule accepts:\n%s", got, suffix, want)
	}
	if got, suffix := Compose([]byte(compact), rs[:1]); string(got) != compact || suffix != "" {
		t.Errorf("with no acceptable reset: %s, %q; want the configuration unchanged", got, suffix)
	}
}

// A reset of every identity of a rule is written with "all": true and no
// key, in the same list and window as the resets of one identity; one
// the configuration no longer accepts (its rule now keeps exact storage,
// which cannot be listed) is left out like any other.
func TestComposeWritesAResetOfEveryIdentityWithoutAKey(t *testing.T) {
	rs := []Reset{{ID: "a1", Rule: "per-ip", Key: "10.0.0.1"}, {ID: "a2", Rule: "per-ip", All: true}}
	got, suffix := Compose([]byte(compact), rs)
	want := strings.TrimSuffix(compact, "}") +
		`,"resets":[{"id":"a1","rule":"per-ip","key":"10.0.0.1"},{"id":"a2","rule":"per-ip","all":true}]}`
	if string(got) != want || suffix == "" {
		t.Fatalf("composed\n%s (%q)\nwant\n%s", got, suffix, want)
	}
	cfg, err := policy.Parse(got)
	if err != nil || len(cfg.Resets) != 2 || !cfg.Resets[1].All || cfg.Resets[1].Key != "" {
		t.Errorf("the filter's parser reads %+v, %v", cfg, err)
	}
	if _, one := Compose([]byte(compact), rs[:1]); one == suffix {
		t.Error("adding a reset of every identity left the version suffix as it was")
	}
	exact := strings.Replace(compact, `"algorithm":"token_bucket"`, `"algorithm":"token_bucket","max_keys":0`, 1)
	got, _ = Compose([]byte(exact), rs)
	if want := strings.TrimSuffix(exact, "}") + `,"resets":[{"id":"a1","rule":"per-ip","key":"10.0.0.1"}]}`; string(got) != want {
		t.Errorf("on a rule of exact storage: %s; want only the reset of one identity:\n%s", got, want)
	}
}

// pushLog records Options.Pushed calls.
type pushLog struct {
	mu     sync.Mutex
	byHash map[string]int64
}

func (l *pushLog) pushed(v int64, config []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byHash[string(config)] = v
}

func (l *pushLog) version(config string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.byHash[config]
	return v, ok
}

func TestResetsArePushedAtOnceAndCarriedByLaterVersionsAndTrials(t *testing.T) {
	log := &pushLog{byHash: map[string]int64{}}
	s := NewServer(nil, Options{WasmPath: "/opt/sluice/ratelimit.wasm", Pushed: log.pushed})
	ctx := context.Background()
	rs := []Reset{{ID: "r1", Rule: "per-ip", Key: "10.0.0.1"}}
	addr := startServer(t, s)
	publish(t, s, 1, compact)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	first := c.recv()
	c.send("1", first.GetNonce(), "")

	if err := s.SetResets(ctx, rs); err != nil {
		t.Fatal(err)
	}
	withResets, suffix := Compose([]byte(compact), rs)
	pushed := c.recv()
	if pushed.GetVersionInfo() != "1"+suffix || pluginConfig(t, pushed) != string(withResets) {
		t.Fatalf("after SetResets: version %q, config %s; want 1%s with the resets", pushed.GetVersionInfo(), pluginConfig(t, pushed), suffix)
	}
	if v, ok := log.version(string(withResets)); !ok || v != 1 {
		t.Errorf("Pushed reported the composed configuration as version %d (%v), want 1", v, ok)
	}
	c.send(pushed.GetVersionInfo(), pushed.GetNonce(), "")
	if err := s.SetResets(ctx, []Reset{{ID: "r1", Rule: "per-ip", Key: "10.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	c.expectNothing(100 * time.Millisecond) // the same resets: nothing new to push
	if _, current, _ := s.serving(); current != "1"+suffix {
		t.Errorf("serving %q, want 1%s (what sluice_xds_node_current compares with)", current, suffix)
	}

	next := strings.Replace(compact, `"burst":3`, `"burst":4`, 1)
	publish(t, s, 2, next)
	v2 := c.recv()
	if want, _ := Compose([]byte(next), rs); v2.GetVersionInfo() != "2"+suffix || pluginConfig(t, v2) != string(want) {
		t.Errorf("version 2 pushed as %q: %s; want it with the resets", v2.GetVersionInfo(), pluginConfig(t, v2))
	}
	c.send(v2.GetVersionInfo(), v2.GetNonce(), "")

	trialCfg := strings.Replace(compact, `"burst":3`, `"burst":5`, 1)
	if err := s.PushTrial(ctx, 2, []byte(trialCfg)); err != nil {
		t.Fatal(err)
	}
	tr := c.recv()
	if want, _ := Compose([]byte(trialCfg), rs); tr.GetVersionInfo() != "2+trial1"+suffix || pluginConfig(t, tr) != string(want) {
		t.Errorf("trial pushed as %q: %s; want it with the resets", tr.GetVersionInfo(), pluginConfig(t, tr))
	}
	if n, ok := policyNumber(tr.GetVersionInfo()); !ok || n != 2 {
		t.Errorf("policyNumber(%q) = %d, %v; want 2", tr.GetVersionInfo(), n, ok)
	}
	c.send(tr.GetVersionInfo(), tr.GetNonce(), "")
	if err := s.SetResets(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if back := c.recv(); back.GetVersionInfo() != "2+trial1" || pluginConfig(t, back) != trialCfg {
		t.Errorf("without resets the trial is pushed as %q: %s; want its own bytes", back.GetVersionInfo(), pluginConfig(t, back))
	}
}

func TestResetsSetBeforeTheFirstPublishGoOutWithIt(t *testing.T) {
	s, addr := newTestServer(t)
	rs := []Reset{{ID: "r1", Rule: "per-ip", Key: "10.0.0.1"}}
	if err := s.SetResets(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	c.expectNothing(100 * time.Millisecond) // nothing published yet
	publish(t, s, 3, compact)
	want, suffix := Compose([]byte(compact), rs)
	if resp := c.recv(); resp.GetVersionInfo() != "3"+suffix || pluginConfig(t, resp) != string(want) {
		t.Errorf("first push %q: %s; want version 3 with the resets", resp.GetVersionInfo(), pluginConfig(t, resp))
	}
}
