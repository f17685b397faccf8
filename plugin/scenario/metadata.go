package scenario

// metadata keys and matches a request on Envoy's dynamic metadata, which
// filters before Sluice write: jwt_authn the verified token's payload
// (payload_in_metadata), json_to_metadata a field of the request body. So
// a limit per verified user, stricter for some models, needs no header a
// client could forge. A value that is absent (or null, which Envoy cannot
// pass) is missing like any other; a number reaches the filter as Envoy
// serializes it (8 bytes), which keys as well as a string.

import (
	"encoding/binary"
	"math"
	"testing"
)

func init() {
	register(Case{Name: "MetadataKeysAndMatchesEnvoyDynamicMetadata", Run: metadataSources})
}

const (
	jwtSub    = "@metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"
	jwtTier   = "@metadata:envoy.filters.http.jwt_authn:jwt_payload.tier"
	bodyModel = "@metadata:envoy.filters.http.json_to_metadata:model"
)

const metadataConfig = `{"policies": [
 {"name": "users", "rules": [
  {"name": "reasoning-models", "match": {"metadata:envoy.filters.http.json_to_metadata:model": {"in": ["o1", "o3"]}},
   "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}},
  {"name": "per-user", "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
   "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60}}]},
 {"name": "tiers", "rules": [
  {"name": "per-tier", "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.tier"],
   "algorithm": "fixed_window", "algorithm_config": {"limit": 3, "window_seconds": 60}}]}]}`

// envoyDouble is a number as Envoy passes a Struct's number to the filter.
func envoyDouble(f float64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(f))
	return string(b[:])
}

func metadataSources(t *testing.T, start Starter) {
	h := startConfig(t, start, metadataConfig)
	allowed := func(what string, r Request) { t.Helper(); wantAdmitted(t, h, what, r) }
	// A reasoning model: one request per verified user.
	allowed("alice, o1", req(jwtSub, "alice", bodyModel, "o1"))
	wantRejection(t, "alice, o1 again", do(t, h, req(jwtSub, "alice", bodyModel, "o3")), 429,
		`{"error":"rate_limited","rule":"reasoning-models"...`)
	allowed("bob, o1", req(jwtSub, "bob", bodyModel, "o1"))

	// Other models: the user's window.
	allowed("alice, gpt-4o 1", req(jwtSub, "alice", bodyModel, "gpt-4o"))
	allowed("alice, no model", req(jwtSub, "alice"))
	wantRejection(t, "alice, gpt-4o 3", do(t, h, req(jwtSub, "alice", bodyModel, "gpt-4o")), 429,
		`{"error":"rate_limited","rule":"per-user"...`)

	// No verified user: no rule of the policy applies.
	for range 3 {
		allowed("no metadata", req(bodyModel, "o1"))
	}

	// A numeric claim keys its own bucket; another number another.
	two, three := envoyDouble(2), envoyDouble(3)
	for i := range 3 {
		allowed("tier 2, request "+string(rune('1'+i)), req(jwtTier, two))
	}
	wantRejection(t, "tier 2, request 4", do(t, h, req(jwtTier, two)), 429, `{"error":"rate_limited","rule":"per-tier"...`)
	allowed("tier 3", req(jwtTier, three))
	noRecoveredPanics(t, h)
}
