package scenario

// connection keys a request by the downstream connection it came on
// (Envoy's connection.id, a uint64 handed over as 8 bytes): a bucket per
// connection, as local_ratelimit's local_rate_limit_per_downstream_connection
// gives, so one client's keep-alive or HTTP/2 connection cannot take what
// its neighbours behind the same address get.

import "testing"

func init() {
	register(Case{Name: "ConnectionKeysABucketPerDownstreamConnection", Run: connectionKeyed})
}

const connectionConfig = `{"policies": [{"name": "per-connection", "rules": [
  {"name": "conn", "limit_keys": ["connection"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 0.001, "burst": 2},
   "overrides": [{"key": "4294967303", "algorithm_config": {"rps": 0.001, "burst": 3}}]}]}]}`

func connectionKeyed(t *testing.T, start Starter) {
	h := startConfig(t, start, connectionConfig)
	allowed := func(what string, r Request) { t.Helper(); wantAdmitted(t, h, what, r) }
	refused := func(what string, r Request) {
		t.Helper()
		wantRejection(t, what, do(t, h, r), 429, `{"error":"rate_limited","rule":"conn"...`, "ratelimit-policy", `"conn";q=2;w=2000`)
	}
	// Two connections from one address: a bucket each.
	for i := range 2 {
		allowed("connection 7, request "+string(rune('1'+i)), req("@connection", "7"))
	}
	refused("connection 7, request 3", req("@connection", "7"))
	allowed("connection 8 from the same address", req("@connection", "8"))
	// Envoy numbers its first connection 0, a number like any other.
	allowed("connection 0", req("@connection", "0"))
	allowed("connection 0 again", req("@connection", "0"))
	refused("connection 0, third", req("@connection", "0"))

	// The identity is the number in decimal: 2^32 + 7 has its own override
	// (burst 3), found by its text (which a number read in the wrong byte
	// order, or only in part, would miss).
	big := req("@connection", "4294967303")
	for i := range 3 {
		allowed("connection 2^32+7, request "+string(rune('1'+i)), big)
	}
	wantRejection(t, "connection 2^32+7, request 4", do(t, h, big), 429,
		`{"error":"rate_limited","rule":"conn"...`, "ratelimit-policy", `"conn";q=3;w=3000`)

	allowed("the largest connection number", req("@connection", "18446744073709551615"))

	// Without the property, or with one that is not 8 bytes, the rule has
	// no identity for the request and does not apply.
	for range 4 {
		allowed("no connection number", req())
		odd := req()
		odd.Properties["connection.id"] = []byte{7, 0, 0, 0}
		allowed("a 4-byte connection number", odd)
	}
	noRecoveredPanics(t, h)
}
