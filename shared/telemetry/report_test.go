package telemetry

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// validJSON is the contract's example report (docs/telemetry.md).
const validJSON = `{
  "v": 1,
  "node": "envoy-1",
  "vm": "3f2a9c01",
  "vm_start_ms": 1763770000000,
  "seq": 42,
  "sent_at_ms": 1763770042000,
  "interval_ms": 1000,
  "config_hash": "9ae1c2d34f00aa11",
  "rules": [
    {"rule": "free", "allowed": 1200, "rejected": 30, "shadow_rejected": 0, "fail_open": 0}
  ],
  "buckets": [
    {"rule": "free", "identity": "header:x-api-key=sk_l…9f3a#7c1e", "tokens": 3.5, "burst": 20,
     "last_refill": 1763770041.25, "rejects": 12}
  ],
  "reports_dropped": 0
}`

func TestDecodeValid(t *testing.T) {
	r, err := Decode([]byte(validJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := &Report{
		V: 1, Node: "envoy-1", VM: "3f2a9c01", VMStartMS: 1763770000000, Seq: 42, SentAtMS: 1763770042000,
		IntervalMS: 1000, ConfigHash: "9ae1c2d34f00aa11",
		Rules: []RuleCounters{{Rule: "free", Allowed: 1200, Rejected: 30}},
		Buckets: []Bucket{{Rule: "free", Identity: "header:x-api-key=sk_l…9f3a#7c1e", Tokens: 3.5, Burst: 20,
			LastRefill: 1763770041.25, Rejects: 12}},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}

	// Optional fields take their defaults; the hash is normalized.
	r, err = Decode([]byte(`{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":0,"sent_at_ms":2,"rules":[],"config_hash":"ABC"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.IntervalMS != DefaultIntervalMS || r.ConfigHash != "0000000000000abc" || r.Buckets == nil || len(r.Buckets) != 0 || r.ReportsDropped != 0 {
		t.Errorf("defaults: %+v", r)
	}

	// null for the arrays: empty (Go encodes a nil slice so).
	r, err = Decode([]byte(`{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":0,"sent_at_ms":2,"rules":null,"buckets":null}`))
	if err != nil || r.Rules == nil || len(r.Rules) != 0 || r.Buckets == nil || len(r.Buckets) != 0 {
		t.Errorf("null arrays: %+v %v", r, err)
	}

	// A node id cut mid-character by the plugin (256 bytes) arrives with
	// U+FFFD: accepted, at most 256 characters.
	cut := strings.Repeat("é", 127) + "\xc3" // 255 bytes, the last one half a character
	if _, err := Decode([]byte(mutate(t, func(m map[string]any) { m["node"] = cut }))); err != nil {
		t.Errorf("a node id cut mid-character: %v", err)
	}

	// Escapes and odd spacing are read as encoding/json reads them.
	r, err = Decode([]byte(" {\"v\":1,\"n\\u006fde\":\"a\\\"b\",\"vm\":\"x\",\"vm_start_ms\":1,\"seq\":1,\"sent_at_ms\":1,\"rules\":[ ],\n\"buckets\":[{\"rule\":\"r\",\"identity\":\"\\u00e9\\ud83d\\ude00\",\"tokens\":0,\"burst\":1e0,\"last_refill\":0,\"rejects\":0}],\"rules\" :[]}"))
	if err == nil {
		t.Fatalf("duplicate rules accepted: %+v", r)
	}
	r, err = Decode([]byte(" {\"v\":1,\"n\\u006fde\":\"a\\\"b\",\"vm\":\"x\",\"vm_start_ms\":1,\"seq\":1,\"sent_at_ms\":1,\"rules\":[{\"rule\":\"r\",\"allowed\":1,\"rejected\":2,\"shadow_rejected\":3,\"fail_open\":4}],\n\"buckets\":[{\"rule\":\"r\",\"identity\":\"\\u00e9\\ud83d\\ude00\",\"tokens\":0,\"burst\":1e0,\"last_refill\":0,\"rejects\":0}]} "))
	if err != nil {
		t.Fatal(err)
	}
	if r.Node != `a"b` || r.Buckets[0].Identity != "é😀" || r.Rules[0] != (RuleCounters{Rule: "r", Allowed: 1, Rejected: 2, ShadowRejected: 3, FailOpen: 4}) {
		t.Errorf("escapes: %+v", r)
	}
}

// mutate applies f to the decoded example and re-encodes it.
func mutate(t *testing.T, f func(m map[string]any)) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(validJSON), &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rule0(m map[string]any) map[string]any   { return m["rules"].([]any)[0].(map[string]any) }
func bucket0(m map[string]any) map[string]any { return m["buckets"].([]any)[0].(map[string]any) }

func TestDecodeNamesEveryBadField(t *testing.T) {
	long := strings.Repeat("x", 300)
	cases := []struct {
		name string
		body string
		want []string // "path: message fragment", each must be in the errors
	}{
		{"v missing", mutate(t, func(m map[string]any) { delete(m, "v") }), []string{"v: required"}},
		{"v 2", mutate(t, func(m map[string]any) { m["v"] = 2 }), []string{"v: unsupported report version 2"}},
		{"v string", mutate(t, func(m map[string]any) { m["v"] = "1" }), []string{"v: must be a whole number, got a string"}},
		{"node missing", mutate(t, func(m map[string]any) { delete(m, "node") }), []string{"node: required"}},
		{"node empty", mutate(t, func(m map[string]any) { m["node"] = "" }), []string{"node: is empty"}},
		{"node long", mutate(t, func(m map[string]any) { m["node"] = long }), []string{"node: is 300 characters long"}},
		{"node control", mutate(t, func(m map[string]any) { m["node"] = "a\u0001b" }), []string{"node: \"a\\x01b\" contains a control character"}},
		{"node DEL", mutate(t, func(m map[string]any) { m["node"] = "a\u007fb" }), []string{"node: \"a\\x7fb\" contains a control character"}},
		{"node number", mutate(t, func(m map[string]any) { m["node"] = 7 }), []string{"node: must be a string, got a number"}},
		{"vm bad char", mutate(t, func(m map[string]any) { m["vm"] = "a b" }), []string{`vm: "a b" contains " "`}},
		{"vm long", mutate(t, func(m map[string]any) { m["vm"] = long }), []string{"vm: is 300 bytes long"}},
		{"vm_start_ms zero", mutate(t, func(m map[string]any) { m["vm_start_ms"] = 0 }), []string{"vm_start_ms: 0 is not a time"}},
		{"vm_start_ms float", mutate(t, func(m map[string]any) { m["vm_start_ms"] = 1.5 }), []string{"vm_start_ms: must be a whole number, got 1.5"}},
		{"seq negative", mutate(t, func(m map[string]any) { m["seq"] = -1 }), []string{"seq: -1 is negative"}},
		{"seq huge", `{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":18446744073709551616,"sent_at_ms":2,"rules":[]}`, []string{"seq: 18446744073709551616 is too large"}},
		{"sent_at_ms null", mutate(t, func(m map[string]any) { m["sent_at_ms"] = nil }), []string{"sent_at_ms: must be a whole number, got null"}},
		{"interval_ms 0", mutate(t, func(m map[string]any) { m["interval_ms"] = 0 }), []string{"interval_ms: 0 is out of range"}},
		{"config_hash bad", mutate(t, func(m map[string]any) { m["config_hash"] = "xyz" }), []string{`config_hash: "xyz" is not a hash`}},
		{"config_hash long", mutate(t, func(m map[string]any) { m["config_hash"] = "00000000000000000" }), []string{"config_hash:"}},
		{"rules missing", mutate(t, func(m map[string]any) { delete(m, "rules") }), []string{"rules: required"}},
		{"rules object", mutate(t, func(m map[string]any) { m["rules"] = map[string]any{} }), []string{"rules: must be an array, got an object"}},
		{"rules[0] string", mutate(t, func(m map[string]any) { m["rules"] = []any{"free"} }), []string{"rules[0]: must be an object"}},
		{"rules[0].rule bad", mutate(t, func(m map[string]any) { rule0(m)["rule"] = "a b" }), []string{`rules[0].rule: "a b" is not a rule name`}},
		{"rules[0].allowed missing", mutate(t, func(m map[string]any) { delete(rule0(m), "allowed") }), []string{"rules[0].allowed: required"}},
		{"rules[0].rejected negative", mutate(t, func(m map[string]any) { rule0(m)["rejected"] = -3 }), []string{"rules[0].rejected: -3 is negative"}},
		{"rules[0].shadow_rejected float", mutate(t, func(m map[string]any) { rule0(m)["shadow_rejected"] = 0.5 }), []string{"rules[0].shadow_rejected: must be a whole number, got 0.5"}},
		{"rules[0].fail_open string", mutate(t, func(m map[string]any) { rule0(m)["fail_open"] = "0" }), []string{"rules[0].fail_open: must be a whole number, got a string"}},
		{"rules[0] unknown", mutate(t, func(m map[string]any) { rule0(m)["shadow_rejects"] = 1 }), []string{"rules[0].shadow_rejects: unknown field"}},
		{"rules[0].overflowed string", mutate(t, func(m map[string]any) { rule0(m)["overflowed"] = "5" }), []string{"rules[0].overflowed: must be a whole number, got a string"}},
		{"rules[0].overflowed negative", mutate(t, func(m map[string]any) { rule0(m)["overflowed"] = -1 }), []string{"rules[0].overflowed: -1 is negative"}},
		{"rules[0].overflowed float", mutate(t, func(m map[string]any) { rule0(m)["overflowed"] = 2.5 }), []string{"rules[0].overflowed: must be a whole number, got 2.5"}},
		{"rules[0].overflowed null", mutate(t, func(m map[string]any) { rule0(m)["overflowed"] = nil }), []string{"rules[0].overflowed: must be a whole number, got null"}},
		{"rules[0].overflowed too large", overflowBody("18446744073709551616", "0"), []string{"rules[0].overflowed: 18446744073709551616 is too large (the maximum is 18446744073709551615)"}},
		{"rules[0].overflow_identities bool", mutate(t, func(m map[string]any) { rule0(m)["overflow_identities"] = true }), []string{"rules[0].overflow_identities: must be a whole number, got a boolean"}},
		{"rules[0].overflow_identities negative", mutate(t, func(m map[string]any) { rule0(m)["overflow_identities"] = -7 }), []string{"rules[0].overflow_identities: -7 is negative"}},
		{"rules[0].overflow_identities above 2^32", overflowBody("0", "4294967297"), []string{"rules[0].overflow_identities: 4294967297 is too large (the maximum is 4294967296 (2^32))"}},
		{"rules[0].overflow_identities above 2^64", overflowBody("0", "18446744073709551616"), []string{"rules[0].overflow_identities: 18446744073709551616 is too large (the maximum is 4294967296 (2^32))"}},
		{"rules[0].overflowed duplicate", overflowBody(`1, "overflowed": 2`, "0"), []string{"rules[0].overflowed: duplicate field"}},
		{"rules[0] unknown overflow field", mutate(t, func(m map[string]any) { rule0(m)["overflow"] = 1 }), []string{"rules[0].overflow: unknown field; the fields are rule, allowed, rejected, shadow_rejected, fail_open and optionally overflowed, overflow_identities"}},
		{"rules duplicate", mutate(t, func(m map[string]any) { m["rules"] = append(m["rules"].([]any), rule0(m)) }), []string{`rules[1].rule: "free" is also rules[0]`}},
		{"buckets[0].rule unknown", mutate(t, func(m map[string]any) { bucket0(m)["rule"] = "paid" }), []string{`buckets[0].rule: "paid" is not in rules`}},
		{"buckets[0].identity empty", mutate(t, func(m map[string]any) { bucket0(m)["identity"] = "" }), []string{"buckets[0].identity: is empty"}},
		{"buckets[0].identity long", mutate(t, func(m map[string]any) { bucket0(m)["identity"] = strings.Repeat("k", 2000) }), []string{"buckets[0].identity: is 2000 bytes long"}},
		{"buckets[0].tokens negative", mutate(t, func(m map[string]any) { bucket0(m)["tokens"] = -1 }), []string{"buckets[0].tokens: -1 is negative"}},
		{"buckets[0].tokens above burst", mutate(t, func(m map[string]any) { bucket0(m)["tokens"] = 21 }), []string{"buckets[0].tokens: 21 is above the burst 20"}},
		{"buckets[0].tokens huge", `{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":1,"sent_at_ms":2,"rules":[{"rule":"r","allowed":0,"rejected":0,"shadow_rejected":0,"fail_open":0}],"buckets":[{"rule":"r","identity":"i","tokens":1e999,"burst":1,"last_refill":1,"rejects":0}]}`, []string{"buckets[0].tokens: 1e999 is out of range"}},
		{"buckets[0].burst zero", mutate(t, func(m map[string]any) { bucket0(m)["burst"] = 0 }), []string{"buckets[0].burst: 0 is out of range"}},
		{"buckets[0].last_refill negative", mutate(t, func(m map[string]any) { bucket0(m)["last_refill"] = -5 }), []string{"buckets[0].last_refill: -5 is not a time"}},
		{"buckets[0].algorithm unknown", mutate(t, func(m map[string]any) { bucket0(m)["algorithm"] = "leaky_bucket" }), []string{`buckets[0].algorithm: "leaky_bucket" is not an algorithm`}},
		{"buckets[0].algorithm number", mutate(t, func(m map[string]any) { bucket0(m)["algorithm"] = 1 }), []string{"buckets[0].algorithm: must be a string"}},
		{"buckets[0].rejects bool", mutate(t, func(m map[string]any) { bucket0(m)["rejects"] = true }), []string{"buckets[0].rejects: must be a whole number, got a boolean"}},
		{"buckets[0] missing fields", mutate(t, func(m map[string]any) { m["buckets"] = []any{map[string]any{}} }), []string{
			"buckets[0].rule: required", "buckets[0].identity: required", "buckets[0].tokens: required",
			"buckets[0].burst: required", "buckets[0].last_refill: required", "buckets[0].rejects: required"}},
		{"reports_dropped negative", mutate(t, func(m map[string]any) { m["reports_dropped"] = -1 }), []string{"reports_dropped: -1 is negative"}},
		{"unknown top-level", mutate(t, func(m map[string]any) { m["Node"] = "x" }), []string{"Node: unknown field"}},
		{"duplicate top-level", `{"v":1,"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":1,"sent_at_ms":2,"rules":[]}`, []string{"v: duplicate field"}},
		{"array body", `[1,2]`, []string{": the report must be a JSON object, got an array"}},
		{"syntax", `{"v":1,`, []string{": the body is not valid JSON (at byte offset 7)"}},
		{"empty", ``, []string{": the body is empty"}},
		{"several at once", mutate(t, func(m map[string]any) {
			m["v"] = 3
			rule0(m)["allowed"] = -1
			bucket0(m)["burst"] = "x"
		}), []string{"v: unsupported", "rules[0].allowed: -1 is negative", "buckets[0].burst: must be a number, got a string"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Decode([]byte(c.body))
			if err == nil {
				t.Fatalf("accepted: %+v", r)
			}
			if r != nil {
				t.Errorf("a report came back with the errors")
			}
			es, ok := err.(Errors)
			if !ok {
				t.Fatalf("error %T, want Errors", err)
			}
			var lines []string
			for _, e := range es {
				lines = append(lines, e.Path+": "+e.Message)
			}
			all := strings.Join(lines, "\n")
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("missing %q in\n%s", w, all)
				}
			}
		})
	}
}

func TestDecodeBoundsErrorsAndArrays(t *testing.T) {
	// Many bad buckets: the answer lists MaxErrors and counts the rest.
	var b strings.Builder
	b.WriteString(`{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":1,"sent_at_ms":2,"rules":[],"buckets":[`)
	for i := range 500 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"rule":"r","identity":"i","tokens":-1,"burst":1,"last_refill":1,"rejects":0}`)
	}
	b.WriteString(`]}`)
	_, err := Decode([]byte(b.String()))
	es, _ := err.(Errors)
	if len(es) != MaxErrors+1 || !strings.Contains(es[MaxErrors].Message, "400 more problems") {
		t.Errorf("%d errors, last %v", len(es), es[len(es)-1])
	}

	// Too many rules.
	b.Reset()
	b.WriteString(`{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":1,"sent_at_ms":2,"rules":[`)
	for i := range MaxReportRules + 5 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"rule":"r` + strconv.Itoa(i) + `","allowed":0,"rejected":0,"shadow_rejected":0,"fail_open":0}`)
	}
	b.WriteString(`]}`)
	if _, err := Decode([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "rules: has more than 1024 entries") {
		t.Errorf("too many rules: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	r, err := Decode([]byte(validJSON))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Decode(b)
	if err != nil {
		t.Fatalf("re-encoded report refused: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(r, r2) {
		t.Errorf("round trip changed the report:\n%+v\n%+v", r, r2)
	}
}

// TestDecodeWindowBucket: a windowed rule's bucket carries its algorithm;
// the field is optional and survives a round trip.
func TestDecodeWindowBucket(t *testing.T) {
	body := strings.Replace(validJSON, `"rejects": 12}`, `"rejects": 12, "algorithm": "rolling_window"}`, 1)
	r, err := Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Buckets[0].Algorithm != "rolling_window" {
		t.Fatalf("algorithm = %q", r.Buckets[0].Algorithm)
	}
	b, _ := json.Marshal(r)
	if r2, err := Decode(b); err != nil || r2.Buckets[0].Algorithm != "rolling_window" {
		t.Fatalf("round trip: %v %s", err, b)
	}
}

// overflowBody is the example report with its rule's overflowed and
// overflow_identities written as given (raw JSON, for numbers that do not
// fit a float64).
func overflowBody(overflowed, identities string) string {
	return strings.Replace(validJSON, `"fail_open": 0}`, `"fail_open": 0, "overflowed": `+overflowed+`, "overflow_identities": `+identities+`}`, 1)
}

// TestDecodeOverflow: a rule's overflowed and overflow_identities are
// optional (0 when missing: reports of plugins without the overflow limit
// stay valid), read up to their maxima, and survive a round trip.
func TestDecodeOverflow(t *testing.T) {
	r, err := Decode([]byte(validJSON))
	if err != nil {
		t.Fatal(err)
	}
	if r.Rules[0].Overflowed != 0 || r.Rules[0].OverflowIdentities != 0 {
		t.Errorf("missing fields: %+v, want 0", r.Rules[0])
	}
	for _, c := range []struct {
		overflowed, identities string
		want                   RuleCounters
	}{
		{"0", "0", RuleCounters{}},
		{"31", "12", RuleCounters{Overflowed: 31, OverflowIdentities: 12}},
		{"18446744073709551615", "4294967296", RuleCounters{Overflowed: math.MaxUint64, OverflowIdentities: MaxOverflowIdentities}},
	} {
		r, err := Decode([]byte(overflowBody(c.overflowed, c.identities)))
		if err != nil {
			t.Fatalf("%s, %s: %v", c.overflowed, c.identities, err)
		}
		got := r.Rules[0]
		if got.Overflowed != c.want.Overflowed || got.OverflowIdentities != c.want.OverflowIdentities || got.Allowed != 1200 {
			t.Errorf("%s, %s: %+v", c.overflowed, c.identities, got)
		}
		b, _ := json.Marshal(r)
		if r2, err := Decode(b); err != nil || !reflect.DeepEqual(r, r2) {
			t.Errorf("round trip: %v\n%s", err, b)
		}
	}
	// Only overflowed, only overflow_identities.
	r, err = Decode([]byte(strings.Replace(validJSON, `"fail_open": 0}`, `"fail_open": 0, "overflow_identities": 3}`, 1)))
	if err != nil || r.Rules[0].Overflowed != 0 || r.Rules[0].OverflowIdentities != 3 {
		t.Errorf("only overflow_identities: %v %+v", err, r)
	}
}
