package policy

import "testing"

// response_bytes is a response cost source: on a quota or a token bucket,
// with max_debt defaulting to the capacity.
func TestResponseBytesIsAResponseCost(t *testing.T) {
	cfg, err := Parse([]byte(withAlg("quota", `{"limit":1e10,"period":"day","cost_source":"response_bytes"}`)))
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.Policies[0].Rules[0].Quota
	if q.Cost.Kind != CostResponseBytes || !q.Cost.FromResponse() || q.Cost.ByStatus() || q.MaxDebt != 1e10 || q.Cost.String() != "response_bytes" {
		t.Errorf("quota %+v", q)
	}
}
