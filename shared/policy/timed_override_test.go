package policy

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

const timedOverrides = `{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 10, "burst": 20},
  "overrides": [
    {"key": "acme", "algorithm_config": {"burst": 400}, "from": "2026-12-24T10:00:00+01:00", "until": "2026-12-27T00:00:00.25Z"},
    {"key": "globex", "algorithm_config": {"burst": 40}, "until": "2026-12-01T00:00:00Z"},
    {"key": "initech", "algorithm_config": {"burst": 30}}]}]}`

// An override's from and until are read as instants, written back in
// UTC, and bound when it applies: from inclusive, until exclusive.
func TestOverridesApplyFromUntil(t *testing.T) {
	cfg, err := Parse([]byte(timedOverrides))
	if err != nil {
		t.Fatal(err)
	}
	os := cfg.Policies[0].Rules[0].Overrides
	from := time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC).UnixNano()
	until := time.Date(2026, 12, 27, 0, 0, 0, 250e6, time.UTC).UnixNano()
	if os[0].From != from || os[0].Until != until || os[1].From != 0 || !os[1].Bounded() || os[2].Bounded() {
		t.Fatalf("bounds %+v %+v %+v", os[0], os[1], os[2])
	}
	for _, c := range []struct {
		at   int64
		want bool
	}{{from - 1, false}, {from, true}, {until - 1, true}, {until, false}} {
		if got := os[0].ActiveAt(c.at); got != c.want {
			t.Errorf("acme at %s: active %v, want %v", time.Unix(0, c.at).UTC().Format(time.RFC3339Nano), got, c.want)
		}
	}
	if !os[2].ActiveAt(0) || !os[2].ActiveAt(until) {
		t.Error("an override without bounds does not always apply")
	}
	norm, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"from":"2026-12-24T09:00:00Z","until":"2026-12-27T00:00:00.25Z"`, `"key":"globex","algorithm_config":{"tokens_per_second":10,"burst":40},"until":"2026-12-01T00:00:00Z"`} {
		if !strings.Contains(string(norm), want) {
			t.Errorf("normalized form lacks %s:\n%s", want, norm)
		}
	}
	back, err := Parse(norm)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Policies[0].Rules[0].Overrides[0]; got.From != from || got.Until != until {
		t.Errorf("after the normalized form: %+v", got)
	}
}

func TestOverrideTimesAreRefusedNamingTheField(t *testing.T) {
	for _, c := range []struct{ fields, want string }{
		{`"from": 1766570400`, `overrides[0].from: must be an RFC 3339 time such as "2026-12-24T18:00:00Z"`},
		{`"until": "2026-12-24"`, `overrides[0].until: "2026-12-24" is not an RFC 3339 time`},
		{`"until": "2026-12-24T10:00:00"`, `overrides[0].until: "2026-12-24T10:00:00" is not an RFC 3339 time`},
		{`"from": "2026-12-24T10:00:00Z", "until": "2026-12-24T10:00:00Z"`, `overrides[0].until: must be after from (2026-12-24T10:00:00Z); the override would never apply`},
		{`"from": "2026-12-24T11:00:00+01:00", "until": "2026-12-24T10:00:00Z"`, `overrides[0].until: must be after from`},
		{`"until": "1969-12-31T23:59:59Z"`, `overrides[0].until: "1969-12-31T23:59:59Z" is out of range; give a time from 1970 to 2200`},
		{`"util": "2026-12-24T10:00:00Z"`, `overrides[0].util`},
	} {
		doc := `{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
		  "algorithm_config": {"rps": 10, "burst": 20}, "overrides": [{"key": "acme", "algorithm_config": {"burst": 40}, ` + c.fields + `}]}]}`
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.fields, err, c.want)
		}
	}
}

// Overrides that have ended are reported by position (a key may be a
// secret), at most five by name, from the instant until is reached.
func TestEndedOverridesAreReportedByPosition(t *testing.T) {
	var os []string
	for i := range 7 {
		os = append(os, `{"key": "k`+strconv.Itoa(i)+`", "algorithm_config": {"burst": 40}, "until": "2026-12-0`+strconv.Itoa(i+1)+`T00:00:00Z"}`)
	}
	os = append(os, `{"key": "secret-api-key", "algorithm_config": {"burst": 40}, "until": "2026-12-20T00:00:00Z"}`)
	cfg, err := Parse([]byte(`{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 10, "burst": 20}, "overrides": [` + strings.Join(os, ",") + `]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	day := func(d int) int64 { return time.Date(2026, 12, d, 0, 0, 0, 0, time.UTC).UnixNano() }
	if w := cfg.Ended(day(1) - 1); len(w) != 0 {
		t.Errorf("before any until: %v", w)
	}
	w := cfg.Ended(day(2))
	if len(w) != 1 || w[0].String() != `rule "api": overrides[0], overrides[1] ended (the last on 2026-12-02T00:00:00Z): those identities have the rule's limits again; remove them` {
		t.Errorf("on the 2nd: %v", w)
	}
	w = cfg.Ended(day(21))
	if len(w) != 1 || !strings.Contains(w[0].Message, "overrides[4], and 3 more ended (the last on 2026-12-20T00:00:00Z)") || strings.Contains(w[0].Message, "secret") {
		t.Errorf("on the 21st: %v", w)
	}
}

// An override may apply weekly: within its bounds, in its schedule's
// windows (a customer's raise for business hours in its own time zone).
func TestOverridesApplyOnTheirSchedule(t *testing.T) {
	cfg, err := Parse([]byte(`{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 10, "burst": 20},
	  "overrides": [{"key": "acme", "algorithm_config": {"rps": 100, "burst": 200},
	    "schedule": {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "until": "18:00", "time_zone": "Europe/Berlin"},
	    "until": "2027-01-01T00:00:00Z"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := &cfg.Policies[0].Rules[0].Overrides[0]
	berlin, _ := time.LoadLocation("Europe/Berlin")
	at := func(y int, m time.Month, d, h, min int) int64 {
		return time.Date(y, m, d, h, min, 0, 0, berlin).UnixNano()
	}
	for _, c := range []struct {
		name string
		at   int64
		want bool
	}{
		{"Thursday 09:00 in Berlin", at(2026, 12, 3, 9, 0), true},
		{"Thursday 08:59", at(2026, 12, 3, 8, 59), false},
		{"Thursday 18:00", at(2026, 12, 3, 18, 0), false},
		{"Saturday noon", at(2026, 12, 5, 12, 0), false},
		{"a Monday after until", at(2027, 1, 4, 12, 0), false},
	} {
		if got := o.AppliesAt(c.at); got != c.want {
			t.Errorf("%s: applies %v, want %v", c.name, got, c.want)
		}
	}
	if !o.Timed() || (&Override{}).Timed() {
		t.Error("Timed: a scheduled override is not timed, or one without bounds and schedule is")
	}
	norm, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := `"schedule":{"days":["mon","tue","wed","thu","fri"],"from":"09:00","until":"18:00","time_zone":"Europe/Berlin"}`; !strings.Contains(string(norm), want) {
		t.Errorf("normalized form lacks %s:\n%s", want, norm)
	}
	if back, err := Parse(norm); err != nil || back.Policies[0].Rules[0].Overrides[0].Schedule == nil {
		t.Errorf("the normalized form does not parse back with the schedule: %v", err)
	}
	_, err = Parse([]byte(`{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 10, "burst": 20},
	  "overrides": [{"key": "acme", "algorithm_config": {"burst": 40}, "schedule": {"days": ["someday"]}}]}]}`))
	if err == nil || !strings.Contains(err.Error(), `overrides[0].schedule.days[0]: must be one of`) {
		t.Errorf("a bad day: %v", err)
	}
}
