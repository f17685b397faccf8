package scenario

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// Helpers shared by the scenario files.

// mustStart starts a host and fails the test if it cannot.
func mustStart(t testing.TB, start Starter, o Options) Host {
	t.Helper()
	h, err := start(t, o)
	if err != nil {
		t.Fatalf("starting the filter: %v", err)
	}
	return h
}

// startConfig starts the filter with config on one VM.
func startConfig(t testing.TB, start Starter, config string) Host {
	t.Helper()
	return mustStart(t, start, Options{Config: []byte(config)})
}

// requestProperties are req's pseudo names of request properties.
var requestProperties = map[string]string{
	"@ip":      "source.address",
	"@peer":    simulate.PeerPrincipalProperty,
	"@route":   simulate.RouteProperty,
	"@cluster": simulate.ClusterProperty,
}

// req builds a request from name/value pairs. A pseudo name of
// requestProperties sets that property instead of a header: "@ip" the
// client address (default "10.0.0.1:5555"), "@peer" the client
// certificate's URI SAN, "@route" the Envoy route's name, "@cluster" the
// upstream cluster's (default none); "@connection" the downstream
// connection's number, in decimal, which the hosts hand over as Envoy does
// (8 bytes, little-endian);
// "@metadata:<namespace>:<keys>" a value of the dynamic metadata, as the
// source of that name reads it.
func req(kv ...string) Request {
	r := Request{Properties: map[string][]byte{"source.address": []byte("10.0.0.1:5555")}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "@connection" {
			n, err := strconv.ParseUint(kv[i+1], 10, 64)
			if err != nil {
				panic("req: @connection " + kv[i+1] + " is not a uint64")
			}
			r.Properties[simulate.ConnectionProperty] = binary.LittleEndian.AppendUint64(nil, n)
			continue
		}
		if prop, ok := requestProperties[kv[i]]; ok {
			r.Properties[prop] = []byte(kv[i+1])
			continue
		}
		if prop, ok := metadataProperty(kv[i]); ok {
			r.Properties[prop] = []byte(kv[i+1])
			continue
		}
		r.Headers = append(r.Headers, Header{kv[i], kv[i+1]})
	}
	if header(r.Headers, ":path") == "" {
		r.Headers = append(r.Headers, Header{":path", "/"})
	}
	return r
}

// metadataProperty is the test hosts' property (a dotted path) behind the
// pseudo name "@metadata:<namespace>:<keys>".
func metadataProperty(pseudo string) (string, bool) {
	name, ok := strings.CutPrefix(pseudo, "@metadata:")
	if !ok {
		return "", false
	}
	return strings.Join(policy.MetadataPath(name), "."), true
}

// header returns the first value of name in hs ("" if absent).
func header(hs []Header, name string) string {
	for _, h := range hs {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

// do runs one stream on VM 0 and fails the test on a host error (a trap).
func do(t testing.TB, h Host, r Request) Response {
	t.Helper()
	return doOn(t, h, 0, r)
}

// doOn runs one stream on VM vm and fails the test on a host error.
func doOn(t testing.TB, h Host, vm int, r Request) Response {
	t.Helper()
	res, err := h.HTTP(vm, r)
	if err != nil {
		t.Fatalf("%s: VM %d: %v", h.Name(), vm, err)
	}
	return res
}

// admitted sends n copies of r on VM 0 and returns how many were allowed.
func admitted(t testing.TB, h Host, n int, r Request) int {
	t.Helper()
	rs := make([]Request, n)
	for i := range rs {
		rs[i] = r
	}
	res, err := h.HTTPMany(0, rs)
	if err != nil {
		t.Fatalf("%s: %v", h.Name(), err)
	}
	ok := 0
	for _, x := range res {
		if !x.Rejected {
			ok++
		}
	}
	return ok
}

// metric returns a plugin metric, 0 if it is not defined.
func metric(h Host, name string) uint64 {
	v, _ := h.Metric(name)
	return v
}

// many runs rs on VM vm and fails the test on a host error or a short answer.
func many(t testing.TB, h Host, vm int, rs []Request) []Response {
	t.Helper()
	res, err := h.HTTPMany(vm, rs)
	if err != nil {
		t.Fatalf("%s: VM %d: %v", h.Name(), vm, err)
	}
	if len(res) != len(rs) {
		t.Fatalf("%s: VM %d: %d responses to %d requests", h.Name(), vm, len(res), len(rs))
	}
	return res
}

// headerCount counts the entries of name in hs.
func headerCount(hs []Header, name string) int {
	n := 0
	for _, h := range hs {
		if h[0] == name {
			n++
		}
	}
	return n
}

// wantHeaders checks that each name/value pair of kv appears in hs exactly
// once with that value; a value "-" means the header must be absent.
func wantHeaders(t testing.TB, what string, hs []Header, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		name, want := kv[i], kv[i+1]
		n := headerCount(hs, name)
		switch {
		case want == "-" && n != 0:
			t.Errorf("%s: %s = %q present, want it absent", what, name, header(hs, name))
		case want != "-" && n != 1:
			t.Errorf("%s: %s appears %d times, want once (%q); headers %v", what, name, n, want, hs)
		case want != "-" && header(hs, name) != want:
			t.Errorf("%s: %s = %q, want %q", what, name, header(hs, name), want)
		}
	}
}

// atoi parses a decimal header value and fails the test on anything else.
func atoi(t testing.TB, what, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %q is not an integer", what, s)
	}
	return n
}

// bearer is an Authorization value carrying an unsigned JWT with payload
// as its claims (the filter reads claims without verifying signatures).
func bearer(payload string) string {
	return "Bearer eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
}

// step moves the clock by d and runs the ticks that are due.
func step(t testing.TB, h Host, d time.Duration) {
	t.Helper()
	h.Advance(d)
	if err := h.Tick(); err != nil {
		t.Fatalf("%s: tick: %v", h.Name(), err)
	}
}

// pending returns the dispatched calls not answered yet.
func pending(t testing.TB, h Host) []Call {
	t.Helper()
	calls, err := h.PendingCalls()
	if err != nil {
		t.Fatalf("%s: pending calls: %v", h.Name(), err)
	}
	return calls
}

// logsContaining counts the plugin's log lines containing sub.
func logsContaining(h Host, sub string) int {
	n := 0
	for _, l := range h.Logs() {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// wantMetrics checks counters by name.
func wantMetrics(t testing.TB, h Host, want map[string]uint64) {
	t.Helper()
	for name, w := range want {
		if got, ok := h.Metric(name); !ok || got != w {
			t.Errorf("%s = %d (defined %v), want %d", name, got, ok, w)
		}
	}
}

// noRecoveredPanics fails the test if a callback of the plugin panicked.
func noRecoveredPanics(t testing.TB, h Host) {
	t.Helper()
	if n := metric(h, "sluice.panics_recovered"); n != 0 {
		t.Errorf("sluice.panics_recovered = %d", n)
	}
}

// alignedStart is a UTC day boundary: windows and periods align to the
// epoch, so window scenarios start their clock there.
var alignedStart = time.Unix((DefaultStart.Unix()/86400+1)*86400, 0)

// keyRule is a one-rule configuration limiting per x-api-key with the given
// algorithm and algorithm_config.
func keyRule(name, algorithm, algorithmConfig string) string {
	return `{"rules": [{"name": "` + name + `", "limit_keys": ["header:x-api-key"], "algorithm": "` + algorithm +
		`", "algorithm_config": ` + algorithmConfig + `}]}`
}

// admittedAcross sends n copies of r, one at a time, on VMs 0, 1, ...,
// vms-1 in turn and returns how many were allowed.
func admittedAcross(t testing.TB, h Host, vms, n int, r Request) int {
	t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		if !doOn(t, h, i%vms, r).Rejected {
			ok++
		}
	}
	return ok
}

// fnv64Hex is the FNV-1a 64 hash of s in 16 hex digits (the config hash of
// telemetry reports; its low 8 digits mask identities).
func fnv64Hex(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%016x", h.Sum64())
}

// wantRejection checks a rejection's status, body and fields. A body
// ending in "..." is a prefix (the filter's JSON ends with the wait).
func wantRejection(t *testing.T, what string, res Response, status int, body string, kv ...string) {
	t.Helper()
	got := string(res.LocalBody)
	matches := got == body
	if prefix, ok := strings.CutSuffix(body, "..."); ok {
		matches = strings.HasPrefix(got, prefix)
	}
	if !res.Rejected || res.Status != status || !matches {
		t.Fatalf("%s: rejected %v, status %d, body %q; want %d %q", what, res.Rejected, res.Status, got, status, body)
	}
	wantHeaders(t, what, res.ResponseHeaders, kv...)
}

// wantRefusedInDebt sends r, which a key in debt must have refused with 429
// and a Retry-After from lo to hi seconds: the time its refill takes to pay
// the debt back, jitter included.
func wantRefusedInDebt(t *testing.T, h Host, what string, r Request, lo, hi int) Response {
	t.Helper()
	res := do(t, h, r)
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("%s: rejected %v status %d, want 429", what, res.Rejected, res.Status)
	}
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < lo || ra > hi {
		t.Errorf("%s: retry-after %d, want %d to %d", what, ra, lo, hi)
	}
	return res
}

// wantAdmitted sends r and fails the test if it is rejected.
func wantAdmitted(t testing.TB, h Host, what string, r Request) {
	t.Helper()
	if res := do(t, h, r); res.Rejected {
		t.Fatalf("%s: rejected (%d %s)", what, res.Status, res.LocalBody)
	}
}

// admittedLeaving sends r and requires it admitted with the RateLimit
// field's remaining (r=) as given.
func admittedLeaving(t testing.TB, h Host, what string, r Request, remaining string) {
	t.Helper()
	res := do(t, h, r)
	if res.Rejected {
		t.Fatalf("%s: rejected", what)
	}
	field := header(res.ResponseHeaders, "ratelimit")
	if _, rest, _ := strings.Cut(field, ";r="); !strings.HasPrefix(rest, remaining+";") {
		t.Fatalf("%s: RateLimit %q, want r=%s", what, field, remaining)
	}
}
