package scenario

// Policy tests decide as the filter does: `ratelimit-admin policy test`
// checks a policy with the simulator (shared/policycheck), so every
// request a test file sends, at its time, must get the same answer from
// the compiled filter under each host: the same status and body, the same
// RateLimit and Retry-After fields, the same shadow header upstream.

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
	"github.com/sluice-rl/sluice/shared/simulate"
)

func init() {
	register(Case{Name: "PolicyTestsDecideAsTheFilter", Run: policyTestsDecideAsTheFilter})
}

// The demo policy and its tests, from the module root.
const (
	DemoPolicy      = "plugin/gateway/demo-config.json"
	DemoPolicyTests = "plugin/gateway/demo-config.tests.yaml"
)

// answerFields are the fields of the filter's answer a policy test can
// check: on a rejection and on an allowed response.
var answerFields = []string{"retry-after", "ratelimit", "ratelimit-policy", "x-ratelimit-reason",
	"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}

func policyTestsDecideAsTheFilter(t *testing.T, start Starter) {
	root, err := wasmtest.Root()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	doc := read(DemoPolicy)
	cfg, err := policy.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	suite, err := policycheck.Parse(read(DemoPolicyTests))
	if err != nil {
		t.Fatal(err)
	}
	var h Host
	current, replayed, rejected, charged := -1, 0, 0, 0
	var clock time.Time
	rep := policycheck.Run(cfg, suite, policycheck.Options{Observe: func(test int, at time.Time, r simulate.Request, sim simulate.Result) {
		if test != current { // each test from fresh state, as policycheck runs it
			if h != nil {
				h.Close()
			}
			h, current, clock = mustStart(t, start, Options{Config: doc, Start: at}), test, at
		}
		h.Advance(at.Sub(clock))
		clock = at
		got := do(t, h, fromSimulated(r))
		where := suite.Tests[test].Name + ", request at +" + at.Sub(suite.Tests[test].Start).String()
		sameDecision(t, where, got, sim)
		replayed++
		if got.Rejected {
			rejected++
		}
		if r.Response != nil && !got.Rejected {
			charged++
		}
	}})
	if h != nil {
		h.Close()
	}
	if rep.Failed() != 0 {
		t.Fatalf("the demo policy fails its tests:\n%s", rep.Text(false))
	}
	if replayed < 250 || rejected < 6 || charged < 2 {
		t.Fatalf("replayed %d requests, %d rejected, %d charged from the response: the tests exercise too little", replayed, rejected, charged)
	}
}

// fromSimulated is the simulated request as a host runs it, answered as
// its sample response says.
func fromSimulated(r simulate.Request) Request {
	out := Request{Properties: map[string][]byte{}}
	for k, v := range r.Properties() {
		out.Properties[k] = v
	}
	out.Headers = []Header{{":method", r.Method}, {":path", r.Path}, {":authority", r.Host}}
	for _, n := range slices.Sorted(mapKeys(r.Headers)) {
		out.Headers = append(out.Headers, Header{n, r.Headers[n]})
	}
	if resp := r.Response; resp != nil {
		status := resp.Status
		if status == 0 {
			status = 200
		}
		out.ResponseHeaders = []Header{{":status", strconv.Itoa(status)}}
		for _, n := range slices.Sorted(mapKeys(resp.Headers)) {
			out.ResponseHeaders = append(out.ResponseHeaders, Header{n, resp.Headers[n]})
		}
		for _, n := range slices.Sorted(mapKeys(resp.Trailers)) {
			out.ResponseTrailers = append(out.ResponseTrailers, Header{n, resp.Trailers[n]})
		}
		if len(resp.Body) > 0 {
			out.ResponseBody = [][]byte{resp.Body}
		}
	}
	return out
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sameDecision fails the test unless the filter answered as the simulator
// decided.
func sameDecision(t *testing.T, where string, got Response, sim simulate.Result) {
	t.Helper()
	if got.Rejected != (sim.Status != 0) {
		t.Fatalf("%s: filter rejected=%v (status %d), simulator status %d (rule %q)", where, got.Rejected, got.Status, sim.Status, sim.Rule)
	}
	if got.Rejected && (got.Status != sim.Status || string(got.LocalBody) != sim.Body) {
		t.Fatalf("%s: filter %d %s, simulator %d %s", where, got.Status, got.LocalBody, sim.Status, sim.Body)
	}
	var want, have []Header
	for _, n := range answerFields {
		for _, f := range sim.Headers {
			if f[0] == n {
				want = append(want, f)
			}
		}
		if v := header(got.ResponseHeaders, n); v != "" {
			have = append(have, Header{n, v})
		}
	}
	if !slices.Equal(have, want) {
		t.Fatalf("%s: answer fields\nfilter    %v\nsimulator %v", where, have, want)
	}
	if up, want := header(got.UpstreamHeaders, policy.DefaultShadowHeader), header(sim.Upstream, policy.DefaultShadowHeader); !got.Rejected && up != want {
		t.Fatalf("%s: upstream %s: filter %q, simulator %q", where, policy.DefaultShadowHeader, up, want)
	}
}
