package filter_test

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// responseCostPolicy has a rule per way a cost comes from the response,
// each on its own path, keyed on x-api-key; nothing refills.
const responseCostPolicy = `{"rules": [
  {"name": "by-header", "match": {"path_prefix": "/header"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 1000, "cost_source": "response_header:x-tokens-used", "default_cost": 7, "max_debt": 300}},
  {"name": "by-trailer", "match": {"path_prefix": "/trailer"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 1000, "cost_source": "response_trailer:x-cost", "default_cost": 9}},
  {"name": "by-body", "match": {"path_prefix": "/body"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 1000, "cost_source": "response_json:usage.input_tokens+usage.output_tokens", "default_cost": 11}},
  {"name": "by-status", "match": {"path_prefix": "/status"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 1000, "cost_source": "response_status:401,5xx", "fixed_cost": 13}},
  {"name": "by-grpc", "match": {"path_prefix": "/grpc"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 1000, "cost_source": "response_grpc_status:unavailable", "fixed_cost": 17}},
  {"name": "by-bytes", "match": {"path_prefix": "/bytes"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 1000, "cost_source": "response_bytes"}}]}`

// randomResponse draws a request to one of the rules and the upstream's
// answer: usable, unusable and absent reports of each kind.
func randomResponse(rng *rand.Rand) simulate.Request {
	pick := func(options ...string) string { return options[rng.IntN(len(options))] }
	resp := &simulate.Response{Status: 200, Headers: map[string]string{}, Trailers: map[string]string{}}
	path := pick("/header", "/trailer", "/body", "/status", "/grpc", "/bytes")
	switch path {
	case "/header":
		if v := pick("", "25", "1.5", "-3", "many", "1e15"); v != "" {
			resp.Headers["x-tokens-used"] = v
		}
	case "/trailer":
		if v := pick("", "40", "abc"); v != "" {
			resp.Trailers["x-cost"] = v
		}
	case "/body":
		resp.Headers["content-type"] = pick("application/json", "text/event-stream")
		resp.Body = []byte(pick("",
			`{"usage":{"input_tokens":12,"output_tokens":30}}`,
			`{"usage":{"output_tokens":"30"}}`,
			`{"error":"overloaded"}`,
			"data: {\"message\":{\"usage\":{\"input_tokens\":3}}}\n\ndata: {\"usage\":{\"input_tokens\":5,\"output_tokens\":8}}\n\ndata: [DONE]\n\n"))
		if rng.IntN(6) == 0 {
			resp.Headers["content-encoding"] = "gzip"
		}
	case "/status":
		resp.Status = []int{200, 401, 403, 503}[rng.IntN(4)]
	case "/grpc":
		resp.Headers["content-type"] = "application/grpc"
		resp.Trailers["grpc-status"] = pick("0", "14", "16", "x")
	case "/bytes":
		resp.Body = make([]byte, []int{0, 1, 7, 120, 999}[rng.IntN(5)])
		if rng.IntN(3) == 0 {
			resp.Headers["content-encoding"] = "gzip" // counted as it passes, readable or not
		}
	}
	return simulate.Request{Method: "POST", Path: path, Host: "api.example.com", ClientAddress: "10.0.0.1:5555",
		Headers: map[string]string{"x-api-key": "k"}, Response: resp}
}

// withResponse is the wasm request answered as r.Response says.
func withResponse(r simulate.Request) *wasmhost.Request {
	w := toWasmRequest(r)
	resp := r.Response
	w.ResponseHeaders = []wasmhost.Header{{":status", fmt.Sprint(resp.Status)}}
	for _, n := range slices.Sorted(maps.Keys(resp.Headers)) {
		w.ResponseHeaders = append(w.ResponseHeaders, wasmhost.Header{n, resp.Headers[n]})
	}
	for _, n := range slices.Sorted(maps.Keys(resp.Trailers)) {
		w.ResponseTrailers = append(w.ResponseTrailers, wasmhost.Header{n, resp.Trailers[n]})
	}
	if len(resp.Body) > 0 {
		w.ResponseBody = [][]byte{resp.Body[:len(resp.Body)/2], resp.Body[len(resp.Body)/2:]}
	}
	return w
}

// TestSimulatorChargesResponsesLikeTheCompiledFilter sends requests with
// sample answers through the compiled filter and the simulator, from the
// same bucket state, and requires the simulator's charge to leave what the
// filter stored, for every way a cost comes from the response.
func TestSimulatorChargesResponsesLikeTheCompiledFilter(t *testing.T) {
	f := start(t, responseCostPolicy, 1)
	cfg, err := policy.Parse([]byte(responseCostPolicy))
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(r *policy.Rule, _ string) (simulate.State, bool) {
		b, ok := f.bucket(r.Name, "k")
		return simulate.State{Bucket: b}, ok
	}
	rng := rand.New(rand.NewPCG(3, 4))
	charged, uncharged := map[string]int{}, map[string]int{}
	for i := 0; i < 300; i++ {
		req := randomResponse(rng)
		now := limiter.Seconds(f.clock.Now().UnixNano())
		sim := simulate.Run(cfg, req, simulate.Options{Now: now, Lookup: lookup})
		var rr *simulate.RuleResult
		for _, r := range sim.Policies[0].Rules {
			if r.Applies {
				rr = &r
			}
		}
		resp := req.Response
		where := fmt.Sprintf("exchange %d (%s; status %d, headers %v, trailers %v, body %q)", i, req.Path, resp.Status, resp.Headers, resp.Trailers, resp.Body)
		if rr == nil {
			t.Fatalf("%s: no rule applies in the simulator", where)
		}
		got := f.doOn(0, withResponse(req))
		if got.Rejected != (sim.Status != 0) {
			t.Fatalf("%s: filter rejected %v, simulator status %d", where, got.Rejected, sim.Status)
		}
		if got.Rejected {
			if rr.Response != nil {
				t.Fatalf("%s: the simulator charged a rejected request", where)
			}
			continue
		}
		if rr.Response == nil {
			t.Fatalf("%s: the simulator charged nothing for an admitted request with a response", where)
		}
		b, ok := f.bucket(rr.Name, "k")
		if !ok { // nothing charged yet: a full bucket
			b.Tokens = 1000
		}
		if math.Abs(b.Tokens-rr.Response.After) > 1e-6 {
			t.Fatalf("%s: the filter left %v tokens, the simulator %v (%+v)", where, b.Tokens, rr.Response.After, *rr.Response)
		}
		if rr.Response.Charged {
			charged[rr.Name]++
		} else {
			uncharged[rr.Name]++
		}
		if b.Tokens <= 0 { // paid back (an empty bucket too): the next exchanges are admitted again
			b.Tokens += 1000
			f.putBucket(rr.Name, "k", b)
		}
	}
	for _, r := range []string{"by-header", "by-trailer", "by-body", "by-status", "by-grpc", "by-bytes"} {
		if charged[r] < 5 {
			t.Errorf("rule %s charged %d times: the exchanges did not cover it", r, charged[r])
		}
	}
	if uncharged["by-status"] == 0 || uncharged["by-grpc"] == 0 {
		t.Errorf("no uncounted status was drawn: %v", uncharged)
	}
}
