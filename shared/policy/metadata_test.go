package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestMetadataSourceKeysAndMatchesOnEnvoyDynamicMetadata(t *testing.T) {
	c, err := Parse([]byte(`{"rules":[{"name":"per-user",
		"match":{"metadata:envoy.filters.http.json_to_metadata:model":{"in":["gpt-4o","o1"]}},
		"limit_keys":["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
		"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := c.RuleByName("per-user")
	want := KeySource{Kind: SourceMetadata, Name: "envoy.filters.http.jwt_authn:jwt_payload.sub"}
	if len(r.Keys) != 1 || r.Keys[0] != want {
		t.Fatalf("keys = %+v, want %+v", r.Keys, want)
	}
	if got := r.Keys[0].String(); got != "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub" {
		t.Errorf("String() = %q", got)
	}
	if len(r.Match) != 1 || r.Match[0].Source.Kind != SourceMetadata || r.Match[0].Source.Name != "envoy.filters.http.json_to_metadata:model" {
		t.Errorf("match = %+v", r.Match)
	}
	out, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"`) {
		t.Errorf("normalized form lost the source: %s", out)
	}
}

func TestMetadataPathIsEnvoysPropertyPath(t *testing.T) {
	for name, want := range map[string][]string{
		"envoy.filters.http.jwt_authn:jwt_payload.sub": {"metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "jwt_payload", "sub"},
		"ns:model": {"metadata", "filter_metadata", "ns", "model"},
		"envoy.filters.http.jwt_authn:[https://idp.example.com].groups.0": {"metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "https://idp.example.com", "groups", "0"},
		"istio_authn:[request.auth.principal]":                            {"metadata", "filter_metadata", "istio_authn", "request.auth.principal"},
		"ns:a.[b.c].d":                                                    {"metadata", "filter_metadata", "ns", "a", "b.c", "d"},
	} {
		if got := MetadataPath(name); !reflect.DeepEqual(got, want) {
			t.Errorf("MetadataPath(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestMetadataNameBoundsAreInclusive(t *testing.T) {
	ok := "ns:" + strings.Repeat("k", 253) // 256 bytes
	if msg := checkMetadataName(ok); msg != "" {
		t.Errorf("256 bytes refused: %s", msg)
	}
	if msg := checkMetadataName(ok + "k"); msg == "" {
		t.Error("257 bytes accepted")
	}
	if msg := checkMetadataName("ns:a.b.c.d.e.f.g.h"); msg != "" {
		t.Errorf("8 keys refused: %s", msg)
	}
}

func TestMetadataCostSourceOnEveryAlgorithmThatTakesACost(t *testing.T) {
	for _, alg := range []string{
		`"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":10,"cost_source":"metadata:envoy.filters.http.json_to_metadata:n"}`,
		`"algorithm":"fixed_window","algorithm_config":{"limit":10,"window_seconds":60,"cost_source":"metadata:envoy.filters.http.json_to_metadata:n"}`,
	} {
		c, err := Parse([]byte(`{"rules":[{"name":"r","limit_keys":["ip:address"],` + alg + `}]}`))
		if err != nil {
			t.Fatal(err)
		}
		rule := c.RuleByName("r")
		cs := rule.TokenBucket
		var got CostSource
		if cs != nil {
			got = cs.Cost
		} else {
			got = rule.Window.Cost
		}
		if got.Kind != CostMetadata || got.Name != "envoy.filters.http.json_to_metadata:n" || got.String() != "metadata:envoy.filters.http.json_to_metadata:n" {
			t.Errorf("%s: cost %+v", alg, got)
		}
	}
	_, err := Parse([]byte(`{"rules":[{"name":"r","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":10,"cost_source":"metadata:ns"}}]}`))
	if err == nil || !strings.Contains(err.Error(), "rules[0].algorithm_config.cost_source") || !strings.Contains(err.Error(), "needs a key after the namespace") {
		t.Errorf("a metadata cost without a key: %v", err)
	}
}
