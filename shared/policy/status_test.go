package policy

import "testing"

// TestParseResponseStatusCost reads "response_status:<statuses>": the set
// counts exactly the listed statuses and classes, and normalizes to one
// text however the list was written.
func TestParseResponseStatusCost(t *testing.T) {
	for _, tc := range []struct {
		alg, cfg   string
		normalized string
		in, out    []int
	}{
		{"token_bucket", `{"rps":0.01,"burst":5,"cost_source":"response_status:401,403"}`, "response_status:401,403", []int{401, 403}, []int{200, 400, 402, 404, 500}},
		{"token_bucket", `{"rps":1,"burst":5,"cost_source":"response_status:5XX"}`, "response_status:5xx", []int{500, 503, 599}, []int{499, 429, 200}},
		{"quota", `{"limit":10,"period":"day","cost_source":"response_status:403,4xx,401"}`, "response_status:4xx", []int{400, 401, 403, 499}, []int{399, 500}},
		{"quota", `{"limit":10,"period":"hour","cost_source":"response_status:599,100,429,429"}`, "response_status:100,429,599", []int{100, 429, 599}, []int{0, 99, 101, 600, 1000, -1}},
	} {
		cfg, err := Parse([]byte(withAlg(tc.alg, tc.cfg)))
		if err != nil {
			t.Fatalf("%s: %v", tc.cfg, err)
		}
		cs, fixed, _ := cfg.Policies[0].Rules[0].CostConfig()
		if cs.Kind != CostResponseStatus || !cs.FromResponse() || fixed != 1 {
			t.Fatalf("%s: cost %+v, fixed_cost %v", tc.cfg, cs, fixed)
		}
		if got := cs.String(); got != tc.normalized {
			t.Fatalf("%s: String() = %q, want %q", tc.cfg, got, tc.normalized)
		}
		for _, s := range tc.in {
			if !cs.Statuses.Has(s) {
				t.Fatalf("%s: %d not counted", tc.cfg, s)
			}
		}
		for _, s := range tc.out {
			if cs.Statuses.Has(s) {
				t.Fatalf("%s: %d counted", tc.cfg, s)
			}
		}
		again, msg := parseCostSource(tc.normalized)
		if msg != "" || again != cs {
			t.Fatalf("%s: the normalized text parses to %+v (%s)", tc.normalized, again, msg)
		}
	}
}

// TestStatusSetCountsEveryListedStatusOnly checks membership over the
// whole range against the list it was parsed from.
func TestStatusSetCountsEveryListedStatusOnly(t *testing.T) {
	set, msg := parseStatusList("100,199,2xx,404,500,599")
	if msg != "" {
		t.Fatal(msg)
	}
	for code := -1; code <= 700; code++ {
		want := code == 100 || code == 199 || code >= 200 && code <= 299 || code == 404 || code == 500 || code == 599
		if set.Has(code) != want {
			t.Fatalf("Has(%d) = %v", code, !want)
		}
	}
	if got := set.String(); got != "100,199,2xx,404,500,599" {
		t.Fatalf("String() = %q", got)
	}
}

// TestParseResponseStatusCostErrors: a bad list is refused naming the item
// and the field.
func TestParseResponseStatusCostErrors(t *testing.T) {
	const c = "rules[0].algorithm_config."
	tb := func(src string) string { return withTB(`{"rps":1,"burst":5,"cost_source":"` + src + `"}`) }
	for _, tc := range []struct {
		name, in, path string
		want           []string
	}{
		{"empty list", tb("response_status:"), c + "cost_source", []string{"names no status", `"response_status:401,403"`}},
		{"above 599", tb("response_status:600"), c + "cost_source", []string{`"600" is not a status`, "from 100 to 599"}},
		{"below 100", tb("response_status:099"), c + "cost_source", []string{`"099" is not a status`}},
		{"space after comma", tb("response_status:401, 403"), c + "cost_source", []string{`" 403" is not a status`, "without spaces"}},
		{"trailing comma", tb("response_status:401,"), c + "cost_source", []string{`"" is not a status`}},
		{"a word", tb("response_status:unauthorized"), c + "cost_source", []string{`"unauthorized" is not a status`}},
		{"half a class", tb("response_status:4x1"), c + "cost_source", []string{`"4x1" is not a status`}},
		{"class 6xx", tb("response_status:6xx"), c + "cost_source", []string{`"6xx" is not a status`}},
		{"on a window", withAlg("sliding_window", `{"limit":5,"window_seconds":60,"cost_source":"response_status:401"}`), c + "cost_source", []string{"token_bucket and quota only"}},
		{"with delays", withTB(`{"rps":5,"burst":10,"cost_source":"response_status:401","max_delay_ms":100}`), c + "max_delay_ms", []string{"cannot be combined with a response cost_source"}},
		{"cost above burst", withTB(`{"rps":1,"burst":5,"cost_source":"response_status:401","fixed_cost":6}`), c + "fixed_cost", []string{"exceeds burst 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantOneError(t, tc.in, tc.path, tc.want...) })
	}
}

// TestParseResponseGRPCStatusCost reads "response_grpc_status:<codes>":
// the set counts exactly the named codes, OK included when named, and
// normalizes in code order; bad names are refused with a suggestion.
func TestParseResponseGRPCStatusCost(t *testing.T) {
	cfg, err := Parse([]byte(withTB(`{"rps":0.01,"burst":5,"cost_source":"response_grpc_status:unauthenticated,permission_denied,ok"}`)))
	if err != nil {
		t.Fatal(err)
	}
	cs, _, _ := cfg.Policies[0].Rules[0].CostConfig()
	if cs.Kind != CostResponseGRPCStatus || !cs.FromResponse() || !cs.ByStatus() {
		t.Fatalf("cost %+v", cs)
	}
	if got := cs.String(); got != "response_grpc_status:ok,permission_denied,unauthenticated" {
		t.Fatalf("String() = %q", got)
	}
	for code := -1; code <= 20; code++ {
		if want := code == 0 || code == 7 || code == 16; cs.GRPCCodes.Has(code) != want {
			t.Fatalf("Has(%d) = %v", code, !want)
		}
	}
	if again, msg := parseCostSource(cs.String()); msg != "" || again != cs {
		t.Fatalf("the normalized text parses to %+v (%s)", again, msg)
	}
	const c = "rules[0].algorithm_config."
	for _, tc := range []struct{ src, want string }{
		{"response_grpc_status:", "names no status"},
		{"response_grpc_status:unauthenticatd", `did you mean "unauthenticated"?`},
		{"response_grpc_status:UNAUTHENTICATED", "lower case"},
		{"response_grpc_status:16", `"16" is not a gRPC status`},
		{"response_grpc_status:ok, internal", `" internal" is not a gRPC status`},
	} {
		wantOneError(t, withTB(`{"rps":1,"burst":5,"cost_source":"`+tc.src+`"}`), c+"cost_source", tc.want)
	}
}
