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
