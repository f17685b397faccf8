package telemetry

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzDecode: Decode never panics; what it accepts satisfies the report's
// invariants, reads as encoding/json reads it, survives a round trip; what it refuses comes with bounded, located errors.
// Seeds: testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(validJSON))
	f.Add([]byte(validFleetJSON))
	f.Add([]byte(overflowBody("18446744073709551615", "4294967296")))
	f.Add([]byte(overflowBody("7", "4294967297")))
	f.Add([]byte(`{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":0,"sent_at_ms":2,"rules":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data)
		if err != nil {
			es, ok := err.(Errors)
			if !ok || len(es) == 0 || len(es) > MaxErrors+1 || r != nil {
				t.Fatalf("bad error %T %v (report %v)", err, err, r)
			}
			for _, e := range es {
				if e.Message == "" || !utf8.ValidString(e.Path) {
					t.Fatalf("bad field error %+v", e)
				}
			}
			return
		}
		checkInvariants(t, r)

		// encoding/json reads the same values (the format is a strict subset).
		ref := Report{IntervalMS: DefaultIntervalMS, Rules: []RuleCounters{}, Buckets: []Bucket{}}
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("accepted, but encoding/json refuses it: %v", err)
		}
		if ref.ConfigHash != "" {
			ref.ConfigHash, _ = normalizeHash(ref.ConfigHash)
		}
		if ref.Rules == nil { // "rules": null
			ref.Rules = []RuleCounters{}
		}
		if ref.Buckets == nil {
			ref.Buckets = []Bucket{}
		}
		if ref.Fleet != nil && ref.Fleet.Rules == nil { // "fleet": {"rules": null, ...}
			ref.Fleet.Rules = []FleetRule{}
		}
		if !reflect.DeepEqual(*r, ref) {
			t.Fatalf("Decode and encoding/json differ:\n%+v\n%+v", *r, ref)
		}

		// Round trip.
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Decode(b)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, r, r2)
		}

	})
}

func checkInvariants(t *testing.T, r *Report) {
	t.Helper()
	ok := r.V == FormatVersion && r.Node != "" && utf8.RuneCountInString(r.Node) <= MaxNodeLen && r.VM != "" && len(r.VM) <= MaxVMLen &&
		r.VMStartMS >= 1 && r.SentAtMS >= 1 && r.IntervalMS >= 1 && r.IntervalMS <= MaxIntervalMS &&
		(r.ConfigHash == "" || len(r.ConfigHash) == 16) && len(r.Rules) <= MaxReportRules && len(r.Buckets) <= MaxReportBuckets
	if !ok {
		t.Fatalf("invariants broken: %+v", r)
	}
	rules := map[string]bool{}
	for _, rc := range r.Rules {
		if rules[rc.Rule] {
			t.Fatalf("duplicate rule %q", rc.Rule)
		}
		rules[rc.Rule] = true
	}
	for _, b := range r.Buckets {
		if !rules[b.Rule] || b.Identity == "" || len(b.Identity) > MaxIdentityLen ||
			math.IsNaN(b.Tokens) || b.Tokens < 0 || !(b.Burst > 0) || b.Tokens > b.Burst*(1+1e-9)+1e-9 || b.LastRefill < 0 {
			t.Fatalf("bad bucket %+v", b)
		}
	}
}
