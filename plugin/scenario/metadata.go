package scenario

// metadata keys and matches a request on Envoy's dynamic metadata, which
// filters before Sluice write: jwt_authn the verified token's payload
// (payload_in_metadata), json_to_metadata a field of the request body. So
// a limit per verified user, stricter for some models, needs no header a
// client could forge. A value that is absent (or null, which Envoy cannot
// pass) is missing like any other; a number, which Envoy passes as its 8
// bytes, reads as its text.

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

func init() {
	register(
		Case{Name: "MetadataKeysAndMatchesEnvoyDynamicMetadata", Run: metadataSources},
		Case{Name: "MetadataCostChargesWhatAFilterWrote", Run: metadataCost},
		Case{Name: "TelemetryCountsRequestsARuleCouldNotKey", Run: telemetryKeyMissing},
	)
}

const (
	jwtSub    = "@metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"
	jwtTier   = "@metadata:envoy.filters.http.jwt_authn:jwt_payload.tier"
	bodyModel = "@metadata:envoy.filters.http.json_to_metadata:model"
	// The first group of a token whose claims jwt_authn keeps under the
	// issuer, as Envoy Gateway does: a key in brackets, a list's element.
	firstGroup = "@metadata:envoy.filters.http.jwt_authn:[https://idp.example.com].groups.0"
)

const metadataConfig = `{"policies": [
 {"name": "users", "rules": [
  {"name": "reasoning-models", "match": {"metadata:envoy.filters.http.json_to_metadata:model": {"in": ["o1", "o3"]}},
   "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}},
  {"name": "per-user", "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
   "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60}}]},
 {"name": "tiers", "rules": [
  {"name": "per-tier", "match": {"metadata:envoy.filters.http.jwt_authn:jwt_payload.tier": {"in": ["2", "3"]}},
   "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.tier"],
   "algorithm": "fixed_window", "algorithm_config": {"limit": 3, "window_seconds": 60}}]},
 {"name": "groups", "rules": [
  {"name": "per-group", "match": {"metadata:envoy.filters.http.jwt_authn:[https://idp.example.com].groups.0": {"prefix": "team-"}},
   "limit_keys": ["metadata:envoy.filters.http.jwt_authn:[https://idp.example.com].groups.0"],
   "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60}}]}]}`

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

	// A numeric claim (8 bytes from Envoy) reads as its text: it matches
	// "2" and keys its own bucket; another number another. The string "2"
	// is the same value.
	two, three := envoyDouble(2), envoyDouble(3)
	for i := range 2 {
		allowed("tier 2, request "+string(rune('1'+i)), req(jwtTier, two))
	}
	allowed("tier \"2\" as a string", req(jwtTier, "2"))
	wantRejection(t, "tier 2, request 4", do(t, h, req(jwtTier, two)), 429, `{"error":"rate_limited","rule":"per-tier"...`)
	allowed("tier 3", req(jwtTier, three))
	for range 4 {
		allowed("tier 4, which the match leaves out", req(jwtTier, envoyDouble(4)))
	}

	// A key holding dots and colons, and a list's first element.
	allowed("team-a", req(firstGroup, "team-a"))
	wantRejection(t, "team-a again", do(t, h, req(firstGroup, "team-a")), 429, `{"error":"rate_limited","rule":"per-group"...`)
	allowed("team-b", req(firstGroup, "team-b"))
	for range 2 {
		allowed("a group the match leaves out", req(firstGroup, "admins"))
	}
	noRecoveredPanics(t, h)
}

// imagesConfig charges each request the number of images its body asks for
// ("n", which json_to_metadata copies into the metadata), else 1.
const imagesConfig = `{"rules": [
  {"name": "images", "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 10,
     "cost_source": "metadata:envoy.filters.http.json_to_metadata:n", "default_cost": 1}}]}`

func metadataCost(t *testing.T, start Starter) {
	h := startConfig(t, start, imagesConfig)
	const n = "@metadata:envoy.filters.http.json_to_metadata:n"
	// A number as Envoy passes it (8 bytes), and one json_to_metadata
	// wrote as a string: 4 + 3 of 10.
	admittedLeaving(t, h, "four images", req(jwtSub, "alice", n, envoyDouble(4)), "6")
	admittedLeaving(t, h, "three images", req(jwtSub, "alice", n, "3"), "3")
	// No count, or one that is not a cost: default_cost.
	admittedLeaving(t, h, "no count", req(jwtSub, "alice"), "2")
	admittedLeaving(t, h, "a count of zero", req(jwtSub, "alice", n, envoyDouble(0)), "1")
	wantRejection(t, "two more", do(t, h, req(jwtSub, "alice", n, envoyDouble(2))), 429, `{"error":"rate_limited","rule":"images"...`)
	admittedLeaving(t, h, "the last one", req(jwtSub, "alice", n, "1"), "0")
	noRecoveredPanics(t, h)
}

// telemetryKeyMissing: reports count the requests a rule matched but
// skipped for want of a key's value, as its key_missing metric does, so
// the dashboard can tell a rule whose metadata never arrives.
func telemetryKeyMissing(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Clusters: []string{"sluice_admin"},
		Config: []byte(`{"telemetry": {"cluster": "sluice_admin", "token": "t", "interval_ms": 1000}, "rules": [
  {"name": "per-user", "limit_keys": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 100, "burst": 100}},
  {"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 100, "burst": 100}}]}`)})
	for i := range 5 {
		r := req()
		if i < 2 {
			r = req(jwtSub, "alice")
		}
		wantAdmitted(t, h, "request", r)
	}
	calls := reportsByVM(t, h, time.Second)
	got := sumCounts([]*telfmt.Report{decodeReport(t, calls[0], "sluice_admin", "/api/v1/telemetry", "t")})
	if want := (telfmt.RuleCounters{Rule: "per-user", Allowed: 2, KeyMissing: 3}); got["per-user"] != want {
		t.Errorf("per-user: %+v, want %+v", got["per-user"], want)
	}
	if want := (telfmt.RuleCounters{Rule: "per-ip", Allowed: 3}); got["per-ip"] != want {
		t.Errorf("per-ip: %+v, want %+v", got["per-ip"], want)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.per-user.key_missing": 3})
	noRecoveredPanics(t, h)
}
