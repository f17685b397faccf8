package scenario

// Policy tests decide as the filter does: `ratelimit-admin policy test`
// checks a policy with the simulator (shared/policycheck), so every
// request a test file sends, at its time, must get the same answer from
// the compiled filter under each host: the same status and body, the same
// RateLimit and Retry-After fields, the same shadow header upstream.

import (
	"maps"
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
	register(
		Case{Name: "PolicyTestsDecideAsTheFilter", Run: policyTestsDecideAsTheFilter},
		Case{Name: "PolicyTestsHoldConcurrencyPlacesAsTheFilter", Run: policyTestsHoldConcurrencyPlaces},
	)
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
	got := replayPolicyTests(t, start, read(DemoPolicy), read(DemoPolicyTests))
	if got.requests < 250 || got.rejected < 6 || got.charged < 2 {
		t.Fatalf("replayed %+v: the tests exercise too little", got)
	}
}

// A test's requests in flight (in_flight: true) keep their concurrency
// places in the filter as in the simulator: the fourth upload is
// refused while three are held, and the places return after two leases.
func policyTestsHoldConcurrencyPlaces(t *testing.T, start Starter) {
	got := replayPolicyTests(t, start, []byte(`{"rules": [{"name": "uploads", "limit_keys": ["header:x-api-key"],
	  "algorithm": "concurrency", "algorithm_config": {"limit": 3, "max_request_seconds": 30}}]}`), []byte(`
tests:
  - name: three uploads at once, the fourth waits
    request: {method: PUT, path: /files, headers: {x-api-key: k}}
    steps:
      - repeat: 3
        in_flight: true
        expect: {status: 200}
      - expect: {status: 429, rule: uploads}
      - request: {headers: {x-api-key: other}}
        expect: {status: 200}
      - wait: 60s
        expect: {status: 200}
  - name: uploads that end give their place back
    request: {method: PUT, path: /files, headers: {x-api-key: k}}
    repeat: 10
    every: 1s
    expect: {status: 200}
`))
	if got.requests != 16 || got.rejected != 1 || got.held != 3 {
		t.Fatalf("replayed %+v", got)
	}
}

// replayed counts what a replay sent.
type replayed struct{ requests, rejected, charged, held int }

// replayPolicyTests runs tests against the policy doc with the simulator,
// replays every request at its time through the filter (each test on a
// new host, as each test starts from fresh state; a request in flight
// held open until its test ends) and requires the same answers.
func replayPolicyTests(t *testing.T, start Starter, doc, tests []byte) replayed {
	t.Helper()
	cfg, err := policy.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	suite, err := policycheck.Parse(tests)
	if err != nil {
		t.Fatal(err)
	}
	var h Host
	var got replayed
	current := -1
	var clock time.Time
	rep := policycheck.Run(cfg, suite, policycheck.Options{Observe: func(s policycheck.Sent) {
		if s.Test != current {
			if h != nil {
				h.Close()
			}
			h, current, clock = mustStart(t, start, Options{Config: doc, Start: s.At}), s.Test, s.At
		}
		h.Advance(s.At.Sub(clock))
		clock = s.At
		r := fromSimulated(s.Request)
		r.HoldUpstream = s.InFlight
		res := do(t, h, r)
		// A request in flight has no response yet: only its admission is compared.
		sameDecision(t, suite.Tests[s.Test].Name+", request at +"+s.At.Sub(suite.Tests[s.Test].Start).String(), res, s.Result, !s.InFlight)
		got.requests++
		switch {
		case res.Rejected:
			got.rejected++
		case s.InFlight:
			got.held++
		case s.Request.Response != nil:
			got.charged++
		}
	}})
	if h != nil {
		h.Close()
	}
	if rep.Failed() != 0 {
		t.Fatalf("the policy fails its tests:\n%s", rep.Text(false))
	}
	return got
}

// fromSimulated is the simulated request as a host runs it, answered as
// its sample response says.
func fromSimulated(r simulate.Request) Request {
	out := Request{Properties: map[string][]byte{}}
	for k, v := range r.Properties() {
		out.Properties[k] = v
	}
	out.Headers = []Header{{":method", r.Method}, {":path", r.Path}, {":authority", r.Host}}
	for _, n := range slices.Sorted(maps.Keys(r.Headers)) {
		out.Headers = append(out.Headers, Header{n, r.Headers[n]})
	}
	if resp := r.Response; resp != nil {
		status := resp.Status
		if status == 0 {
			status = 200
		}
		out.ResponseHeaders = []Header{{":status", strconv.Itoa(status)}}
		for _, n := range slices.Sorted(maps.Keys(resp.Headers)) {
			out.ResponseHeaders = append(out.ResponseHeaders, Header{n, resp.Headers[n]})
		}
		for _, n := range slices.Sorted(maps.Keys(resp.Trailers)) {
			out.ResponseTrailers = append(out.ResponseTrailers, Header{n, resp.Trailers[n]})
		}
		if len(resp.Body) > 0 {
			out.ResponseBody = [][]byte{resp.Body}
		}
	}
	return out
}

// sameDecision fails the test unless the filter answered as the simulator
// decided; for a request not answered yet (in flight), only whether it
// was admitted.
func sameDecision(t *testing.T, where string, got Response, sim simulate.Result, answered bool) {
	t.Helper()
	if got.Rejected != (sim.Status != 0) {
		t.Fatalf("%s: filter rejected=%v (status %d), simulator status %d (rule %q)", where, got.Rejected, got.Status, sim.Status, sim.Rule)
	}
	if got.Rejected && (got.Status != sim.Status || string(got.LocalBody) != sim.Body) {
		t.Fatalf("%s: filter %d %s, simulator %d %s", where, got.Status, got.LocalBody, sim.Status, sim.Body)
	}
	if !answered && !got.Rejected {
		return
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
