package filter_test

import "testing"

// wholeReadConfig reads two headers: x-api-key for its limit, and x-plan
// for a shadow trial's one exact condition.
const wholeReadConfig = `{"policies": [
  {"name": "limits", "rules": [{"name": "open", "limit_keys": ["header:x-api-key"],
    "algorithm": "token_bucket", "algorithm_config": {"rps": 1e6, "burst": 1e9}}]},
  {"name": "trial", "rules": [{"name": "trial-gold", "mode": "shadow", "shadow_mark": false,
    "match": {"header:x-plan": "gold"}, "limit_keys": ["header:x-api-key"],
    "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}]}`

// Requests that carry two of the configuration's headers are read whole,
// one host call each, and stay so: the trial rule is decided from the
// map's slot without reading x-plan, and the header still counts as
// present. Requests that carry one are read header by header again soon.
func TestRequestsCarryingSeveralHeadersStayReadWhole(t *testing.T) {
	f := start(t, wholeReadConfig, 1)
	vm := f.h.VM(0)
	reads := func(n int, kv ...string) (whole, gets uint64) {
		w0, g0 := vm.HostCalls("proxy_get_header_map_pairs"), vm.HostCalls("proxy_get_header_map_value")
		for range n {
			if res := f.do(kv...); res.Rejected {
				t.Fatalf("%q rejected", kv)
			}
		}
		return vm.HostCalls("proxy_get_header_map_pairs") - w0, vm.HostCalls("proxy_get_header_map_value") - g0
	}
	for _, plan := range []string{"pro", "free"} { // told by its length, and read to be compared
		reads(20, "x-api-key", "k", "x-plan", plan)
		if w, g := reads(30, "x-api-key", "k", "x-plan", plan); w != 30 || g != 0 {
			t.Errorf("x-plan: %s: %d whole reads and %d gets in 30 requests, want 30 and none", plan, w, g)
		}
	}
	reads(20, "x-api-key", "k")
	if w, g := reads(30, "x-api-key", "k"); w != 0 || g != 60 {
		t.Errorf("without x-plan: %d whole reads and %d gets in 30 requests, want none and 60", w, g)
	}
}
