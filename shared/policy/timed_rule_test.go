package policy

import (
	"strings"
	"testing"
	"time"
)

// A maintenance window that refuses writes, and a stricter limit for a
// sale, each for a time; the general rule after them holds otherwise.
const timedRules = `{"rules": [
  {"name": "maintenance", "action": "deny", "deny_status": 503, "match": {"method": {"in": ["POST", "PUT"]}},
   "from": "2026-12-24T02:00:00+01:00", "until": "2026-12-24T03:00:00+01:00"},
  {"name": "sale", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1, "burst": 2}, "until": "2026-12-27T00:00:00.5Z"},
  {"name": "api", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 10, "burst": 20}}]}`

// A rule's from and until are read as instants of any action, written
// back in UTC, and bound when it applies: from inclusive, until exclusive.
func TestRulesApplyFromUntil(t *testing.T) {
	cfg, err := Parse([]byte(timedRules))
	if err != nil {
		t.Fatal(err)
	}
	rs := cfg.Policies[0].Rules
	from := time.Date(2026, 12, 24, 1, 0, 0, 0, time.UTC).UnixNano()
	until := time.Date(2026, 12, 24, 2, 0, 0, 0, time.UTC).UnixNano()
	if rs[0].From != from || rs[0].Until != until || rs[1].From != 0 || !rs[1].Bounded() || rs[2].Bounded() {
		t.Fatalf("bounds %+v %+v %+v", rs[0].Bounds, rs[1].Bounds, rs[2].Bounds)
	}
	for _, c := range []struct {
		at   int64
		want bool
	}{{from - 1, false}, {from, true}, {until - 1, true}, {until, false}} {
		if got := rs[0].ActiveAt(c.at); got != c.want {
			t.Errorf("maintenance at %s: active %v, want %v", time.Unix(0, c.at).UTC().Format(time.RFC3339Nano), got, c.want)
		}
	}
	norm, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"from":"2026-12-24T01:00:00Z","until":"2026-12-24T02:00:00Z"`, `"until":"2026-12-27T00:00:00.5Z"`} {
		if !strings.Contains(string(norm), want) {
			t.Errorf("normalized form lacks %s:\n%s", want, norm)
		}
	}
	if strings.Count(string(norm), `"until"`) != 2 {
		t.Errorf("a rule without bounds got one:\n%s", norm)
	}
	back, err := Parse(norm)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Policies[0].Rules[1].Bounds; got != rs[1].Bounds {
		t.Errorf("after the normalized form: %+v, want %+v", got, rs[1].Bounds)
	}
}

func TestRuleTimesAreRefusedNamingTheField(t *testing.T) {
	for _, c := range []struct{ fields, want string }{
		{`"from": 1766570400`, `rules[0].from: must be an RFC 3339 time such as "2026-12-24T18:00:00Z"`},
		{`"until": "2026-12-24"`, `rules[0].until: "2026-12-24" is not an RFC 3339 time`},
		{`"from": "2026-12-24T10:00:00Z", "until": "2026-12-24T09:00:00Z"`, `rules[0].until: must be after from (2026-12-24T10:00:00Z); the rule would never apply`},
		{`"until": "2201-01-01T00:00:00Z"`, `rules[0].until: "2201-01-01T00:00:00Z" is out of range`},
	} {
		doc := `{"rules": [{"name": "api", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
		  "algorithm_config": {"rps": 10, "burst": 20}, ` + c.fields + `}]}`
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.fields, err, c.want)
		}
	}
}

// A rule that has ended is named (rule names are not secrets), once,
// without its overrides repeated.
func TestEndedRulesAreWarnedOf(t *testing.T) {
	cfg, err := Parse([]byte(timedRules))
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixNano()
	}
	if w := cfg.Ended(at("2026-12-24T01:59:59Z")); len(w) != 0 {
		t.Errorf("before any until: %v", w)
	}
	w := cfg.Ended(at("2026-12-24T02:00:00Z"))
	if len(w) != 1 || w[0].String() != `rule "maintenance": ended on 2026-12-24T02:00:00Z: the rule applies to no request any more; remove it` {
		t.Errorf("after the maintenance window: %v", w)
	}
	if w := cfg.Ended(at("2027-01-01T00:00:00Z")); len(w) != 2 || w[1].Rule != "sale" {
		t.Errorf("after the sale: %v", w)
	}
}
