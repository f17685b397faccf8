package simulate

import (
	"testing"
)

// The charges of the token-bucket kinds are compared with the compiled
// filter's in plugin/filter's
// TestSimulatorChargesResponsesLikeTheCompiledFilter; these pin the words
// and a quota's debt.

func TestSampleResponseChargesAQuotaIntoDebtUpToMaxDebt(t *testing.T) {
	cfg := mustParse(t, `{"rules":[{"name":"daily","limit_keys":["header:x-api-key"],"algorithm":"quota",
	  "algorithm_config":{"limit":100,"period":"day","cost_source":"response_header:x-cost","max_debt":30}}]}`)
	for _, c := range []struct {
		cost  string
		after float64
	}{{"40", 60}, {"130", -30}, {"5000", -30}} {
		req := Request{Method: "GET", Path: "/", Host: "h", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"},
			Response: &Response{Headers: map[string]string{"x-cost": c.cost}}}
		rr := Run(cfg, req, Options{Now: 1.7e9}).Policies[0].Rules[0]
		if rr.Response == nil || !rr.Response.Charged || rr.Response.After != c.after || rr.Response.Why != "response header x-cost" {
			t.Errorf("cost %s: %+v, want %v left", c.cost, rr.Response, c.after)
		}
	}
}

func TestSampleResponseSaysWhyItChargesWhatItCharges(t *testing.T) {
	for _, c := range []struct {
		source string
		resp   Response
		cost   float64 // -1: nothing charged
		why    string
	}{
		{"response_header:x-cost", Response{}, 4, "no response header x-cost: default_cost"},
		{"response_header:x-cost", Response{Headers: map[string]string{"x-cost": "lots"}}, 4, `response header x-cost "lots" is not a cost: default_cost`},
		{"response_trailer:x-cost", Response{Trailers: map[string]string{"x-cost": "12.5"}}, 12.5, "response trailer x-cost"},
		{"response_json:usage.total_tokens", Response{Headers: map[string]string{"content-encoding": "br"}, Body: []byte("x")}, 4,
			"the body is br-encoded and cannot be read: default_cost"},
		{"response_json:usage.total_tokens", Response{}, 4, "no body: default_cost"},
		{"response_json:usage.total_tokens", Response{Body: []byte(`{"usage":{"total_tokens":"9"}}`)}, 4,
			"response body usage.total_tokens holds something that is not a cost: default_cost"},
		{"response_status:401,5xx", Response{Status: 502}, 3, "status 502 is counted"},
		{"response_status:401,5xx", Response{}, -1, "status 200 is not counted"},
		{"response_grpc_status:unavailable", Response{Headers: map[string]string{"grpc-status": "14"}}, 3, "gRPC status unavailable is counted"},
		{"response_grpc_status:unavailable", Response{Trailers: map[string]string{"grpc-status": "+14"}}, -1, `gRPC status "+14" is not counted`},
	} {
		cfg := mustParse(t, `{"rules":[{"name":"r","limit_keys":["header:x-api-key"],"algorithm":"token_bucket",
		  "algorithm_config":{"rps":1,"burst":100,"fixed_cost":3,"default_cost":4,"cost_source":"`+c.source+`"}}]}`)
		resp := c.resp
		req := Request{Method: "GET", Path: "/", Host: "h", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-api-key": "k"}, Response: &resp}
		got := Run(cfg, req, Options{Now: 1.7e9}).Policies[0].Rules[0].Response
		switch {
		case got == nil:
			t.Errorf("%s %+v: no charge", c.source, c.resp)
		case got.Why != c.why || c.cost < 0 && (got.Charged || got.After != 100) || c.cost >= 0 && (!got.Charged || got.Cost != c.cost || got.After != 100-c.cost):
			t.Errorf("%s %+v: %+v, want cost %v (%s)", c.source, c.resp, *got, c.cost, c.why)
		}
	}
}
