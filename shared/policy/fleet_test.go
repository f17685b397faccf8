package policy

import (
	"reflect"
	"strings"
	"testing"
)

const globalRule = `{"name":"g","limit_keys":["header:x-k"],"algorithm":"token_bucket","scope":"global",
  "algorithm_config":{"tokens_per_second":10,"burst":20}}`

func globalWindow(algorithm, config string) string {
	return `{"name":"w","limit_keys":["header:x-k"],"scope":"global","algorithm":"` + algorithm + `","algorithm_config":` + config + `}`
}

func TestGlobalFixedWindowAndQuotaAreAccepted(t *testing.T) {
	doc := `{"fleet":{"cluster":"rls"},"rules":[` + globalWindow("fixed_window", `{"limit":100,"window_seconds":60}`) + `,` +
		strings.Replace(globalWindow("quota", `{"limit":1000,"period":"month","time_zone":"Europe/Paris"}`), `"w"`, `"q"`, 1) + `]}`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rs := c.Policies[0].Rules
	if !rs[0].Global || rs[0].Window == nil || rs[0].Window.Limit != 100 {
		t.Errorf("fixed window rule: %+v", rs[0])
	}
	if !rs[1].Global || rs[1].Quota == nil || rs[1].Quota.TimeZone != "Europe/Paris" {
		t.Errorf("quota rule: %+v", rs[1])
	}
}

func TestGlobalSlidingAndRollingWindowsAreAccepted(t *testing.T) {
	doc := `{"fleet":{"cluster":"rls"},"rules":[` + globalWindow("sliding_window", `{"limit":100,"window_seconds":60}`) + `,` +
		strings.Replace(globalWindow("rolling_window", `{"limit":1000,"window_seconds":86400,"period_seconds":3600,"max_per_period":100}`), `"w"`, `"r"`, 1) + `]}`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rs := c.Policies[0].Rules
	if !rs[0].Global || rs[0].Algorithm != AlgorithmSlidingWindow || rs[0].Window == nil || rs[0].Window.Limit != 100 {
		t.Errorf("sliding window rule: %+v", rs[0])
	}
	if !rs[1].Global || rs[1].Window == nil || rs[1].Window.Periods() != 24 || rs[1].Window.MaxPerPeriod != 100 {
		t.Errorf("rolling window rule: %+v", rs[1])
	}
}

func TestFleetDefaults(t *testing.T) {
	c, err := Parse([]byte(`{"fleet":{"cluster":"rls"},"rules":[` + globalRule + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Fleet{Cluster: "rls", Authority: DefaultFleetAuthority, Domain: DefaultFleetDomain,
		TimeoutMS: DefaultFleetTimeout, SyncIntervalMS: DefaultFleetSyncInterval, LeaseMin: DefaultLeaseMin,
		LeaseMax: DefaultLeaseMax, LeaseTTLMS: DefaultLeaseTTL, OnBackendDown: BackendDownLocalShare}
	if c.Fleet == nil || *c.Fleet != want {
		t.Fatalf("fleet = %+v, want %+v", c.Fleet, want)
	}
	if !c.Policies[0].Rules[0].Global {
		t.Fatal("scope global not parsed")
	}
	b, _ := c.MarshalJSON()
	back, err := Parse(b)
	if err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("normalized form does not parse back: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), `"scope":"global"`) {
		t.Fatalf("scope missing from %s", b)
	}
}

func TestFleetAllFields(t *testing.T) {
	c, err := Parse([]byte(`{"fleet":{"cluster":"rls","authority":"a","domain":"d","timeout_ms":40,"sync_interval_ms":100,
		"lease_min":5,"lease_max":50,"lease_ttl_ms":1000,"on_backend_down":"deny","fleet_size":3},"rules":[` + globalRule + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Fleet{"rls", "a", "d", 40, 100, 5, 50, 1000, BackendDownDeny, 3}
	if *c.Fleet != want {
		t.Fatalf("fleet = %+v", *c.Fleet)
	}
}

func TestFleetErrors(t *testing.T) {
	local := strings.Replace(globalRule, `"scope":"global",`, "", 1)
	cases := []struct{ doc, path, msg string }{
		{`{"rules":[` + globalRule + `]}`, "rules[0].scope", `needs a top-level "fleet"`},
		{`{"fleet":{"cluster":"x"},"rules":[` + strings.Replace(globalRule, `"global"`, `"world"`, 1) + `]}`, "rules[0].scope", `"world"`},
		{`{"fleet":{},"rules":[` + local + `]}`, "fleet.cluster", "missing"},
		{`{"fleet":[],"rules":[` + local + `]}`, "fleet", "must be an object"},
		{`{"fleet":{"cluster":"x","timeout_ms":300},"rules":[` + local + `]}`, "fleet.timeout_ms", "less than sync_interval_ms"},
		{`{"fleet":{"cluster":"x","lease_min":9,"lease_max":3},"rules":[` + local + `]}`, "fleet.lease_min", "above lease_max"},
		{`{"fleet":{"cluster":"x","lease_ttl_ms":400},"rules":[` + local + `]}`, "fleet.lease_ttl_ms", "twice sync_interval_ms"},
		{`{"fleet":{"cluster":"x","on_backend_down":"panic"},"rules":[` + local + `]}`, "fleet.on_backend_down", `"panic"`},
		{`{"fleet":{"cluster":"x","fleet_size":-1},"rules":[` + local + `]}`, "fleet.fleet_size", "out of range"},
		{`{"fleet":{"cluster":"x","sync_interval_ms":1.5},"rules":[` + local + `]}`, "fleet.sync_interval_ms", "not an integer"},
		{`{"fleet":{"cluster":"a b"},"rules":[` + local + `]}`, "fleet.cluster", "space"},
		{`{"fleet":{"cluster":"x","lease":1},"rules":[` + local + `]}`, "fleet.lease", "unknown"},
		{`{"fleet":{"cluster":"x"},"rules":[` + strings.Replace(globalRule, `"burst":20`, `"burst":20,"max_delay_ms":100`, 1) + `]}`,
			"rules[0].algorithm_config.max_delay_ms", "not supported"},
		{`{"fleet":{"cluster":"x"},"rules":[` + globalWindow("sliding_window", `{"limit":0.5,"window_seconds":60}`) + `]}`,
			"rules[0].algorithm_config.limit", "below 1"},
		{`{"fleet":{"cluster":"x"},"rules":[` + globalWindow("rolling_window", `{"limit":10,"window_seconds":60,"period_seconds":10,"max_per_period":0.5}`) + `]}`,
			"rules[0].algorithm_config.max_per_period", "below 1"},
		{`{"fleet":{"cluster":"x"},"rules":[` + globalWindow("fixed_window", `{"limit":0.5,"window_seconds":60}`) + `]}`,
			"rules[0].algorithm_config.limit", "below 1"},
		{`{"fleet":{"cluster":"x"},"rules":[` + strings.Replace(globalRule, `["header:x-k"]`, `["header:x-k","connection"]`, 1) + `]}`,
			"rules[0].scope", `cannot key by "connection"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		es, _ := err.(Errors)
		found := false
		for _, e := range es {
			if e.Path == c.path && strings.Contains(e.Message, c.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want an error at %s containing %q, got %v", c.doc, c.path, c.msg, err)
		}
	}
}

// A global token bucket or quota may charge what the response reports (the
// rate limit service takes what a pool cannot pay into its debt, or beyond
// the quota's limit).
func TestGlobalTokenBucketChargedFromTheResponse(t *testing.T) {
	for _, cs := range []string{`"response_header:x-tokens"`, `"response_json:usage.total_tokens"`, `"response_status:429"`} {
		rule := strings.Replace(globalRule, `"burst":20`, `"burst":20,"cost_source":`+cs+`,"max_debt":15`, 1)
		c, err := Parse([]byte(`{"fleet":{"cluster":"rls"},"rules":[` + rule + `]}`))
		if err != nil {
			t.Fatalf("%s: %v", cs, err)
		}
		r := c.Policies[0].Rules[0]
		if !r.Global || !r.TokenBucket.Cost.FromResponse() || r.TokenBucket.MaxDebt != 15 {
			t.Fatalf("%s: global %v, cost %v, max_debt %v", cs, r.Global, r.TokenBucket.Cost, r.TokenBucket.MaxDebt)
		}
	}
}

func TestGlobalQuotaChargedFromTheResponse(t *testing.T) {
	c, err := Parse([]byte(`{"fleet":{"cluster":"x"},"rules":[` +
		globalWindow("quota", `{"limit":100,"period":"day","cost_source":"response_json:usage.total_tokens","max_debt":40}`) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Policies[0].Rules[0]; !r.Global || !r.Quota.Cost.FromResponse() || r.Quota.MaxDebt != 40 {
		t.Fatalf("global %v, cost %v, max_debt %v", r.Global, r.Quota.Cost, r.Quota.MaxDebt)
	}
}
