package trial

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policy/policytest"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// TestATrialNeverChangesWhatTheFilterEnforces runs random current policies
// and random drafts (every local algorithm, action, mode, match operator
// and key source) in the compiled filter twice, side by side on one clock:
// the current configuration alone, and Merge's configuration with the
// draft's rules in trial. Every request must be answered alike: status,
// body and header fields of a rejection, the response fields of an allowed
// request, and the headers sent upstream. The one documented exception: a
// draft's exempt rule, tried in shadow, exempts requests from the current
// policy's shadow rules too, so with one the shadow header is not compared.
// SLUICE_AGREE_SEED=N runs other policies.
func TestATrialNeverChangesWhatTheFilterEnforces(t *testing.T) {
	wasm := wasmtest.Build(t, "./plugin")
	rng := rand.New(rand.NewPCG(13, policytest.Seed(t)))
	rejected, allowed, triedRejections := 0, 0, 0
	enough := func() bool { return rejected >= 100 && allowed >= 100 && triedRejections >= 20 }
	// 16 pairs of policies, more (up to 48) while a seed's drafts have
	// refused too little to show anything.
	for c := 0; c < 16 || c < 48 && !enough(); c++ {
		current, draft := policytest.Config(rng), policytest.Config(rng)
		merged, pairs, err := Merge([]byte(current), []byte(draft))
		if err != nil {
			t.Fatalf("policy %d: Merge refused a valid draft: %v\ncurrent %s\ndraft %s", c, err, current, draft)
		}
		cfg, err := policy.Parse([]byte(current))
		if err != nil {
			t.Fatal(err)
		}
		clock := wasmhost.NewManualClock(time.Unix(1_700_000_000, 0))
		alone, tried := startFilter(t, wasm, current, clock), startFilter(t, wasm, string(merged), clock)
		draftExempts := strings.Contains(draft, `"exempt"`)
		for i := range 150 {
			clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			req := policytest.Request(rng, cfg.ShadowHeader)
			res := answer(t, tried, req)
			skip := "" // a header not compared
			if draftExempts {
				skip = cfg.ShadowHeader
			}
			if want, got := answerText(answer(t, alone, req), skip), answerText(res, skip); got != want {
				t.Fatalf("policy %d, request %d (%s %s %s %v): the trial changed the answer\ncurrent alone:\n%s\nwith the trial:\n%s\ncurrent %s\nmerged %s",
					c, i, req.Method, req.Path, req.ClientAddress, req.Headers, want, got, current, merged)
			}
			if res.Rejected {
				rejected++
			} else {
				allowed++
			}
		}
		triedRejections += shadowRefusals(t, tried, pairs)
	}
	if !enough() {
		t.Errorf("the run exercised too little: %d rejected, %d allowed, %d refusals by trial rules", rejected, allowed, triedRejections)
	}
}

func startFilter(t *testing.T, wasm []byte, config string, clock *wasmhost.ManualClock) *wasmhost.Host {
	t.Helper()
	h, err := wasmhost.New(context.Background(), wasmhost.Config{Wasm: wasm, PluginConfig: []byte(config), VMs: 1, Clock: clock})
	if err != nil {
		t.Fatalf("starting the filter: %v\n%s", err, config)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// answer sends req through the filter as Envoy would.
func answer(t *testing.T, h *wasmhost.Host, r simulate.Request) *wasmhost.Result {
	t.Helper()
	w := &wasmhost.Request{Properties: wasmhost.Properties(r.Properties()),
		Headers: []wasmhost.Header{{":method", r.Method}, {":path", r.Path}, {":authority", r.Host}}}
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		w.Headers = append(w.Headers, wasmhost.Header{name, r.Headers[name]})
	}
	res, err := h.VM(0).HTTP(context.Background(), w)
	if err != nil {
		t.Fatalf("the filter failed: %v", err)
	}
	return res
}

// answerText is everything of an answer a client or the upstream sees:
// a rejection's status, body and fields, or the response fields and the
// request sent upstream, without the header skip.
func answerText(r *wasmhost.Result, skip string) string {
	var b strings.Builder
	line := func(what string, hs []wasmhost.Header) {
		b.WriteString(what)
		for _, h := range hs {
			if h[0] != skip {
				fmt.Fprintf(&b, " [%s: %s]", h[0], h[1])
			}
		}
		b.WriteByte('\n')
	}
	if r.Rejected {
		fmt.Fprintf(&b, "rejected %d %s\n", r.Local.Status, r.Local.Body)
		line("fields", r.Local.Headers)
		return b.String()
	}
	line("response", r.ResponseHeaders)
	line("upstream", r.UpstreamHeaders)
	return b.String()
}

// shadowRefusals is how many requests the trial rules would have refused,
// from the filter's counters: the run must have tried drafts that refuse.
func shadowRefusals(t *testing.T, h *wasmhost.Host, pairs []Pair) int {
	t.Helper()
	n := 0
	for _, p := range pairs {
		v, _ := h.Metric("sluice.rule." + p.Trial + ".shadow_rejected")
		n += int(v)
	}
	return n
}
