package envoyconfig

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	// The decompressor of docs/llm.md and its gzip library, so that their
	// packed configurations resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/decompressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/decompressor/v3"
	// The filters of docs/llm.md that write the metadata Sluice reads.
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/json_to_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	"sigs.k8s.io/yaml"
)

// TestDocumentedTLSClusterIsValid: the xDS cluster over mutual TLS that
// docs/envoy.md shows parses as Envoy's API and passes its validation,
// the TLS context inside included, and speaks HTTP/2 as a gRPC cluster
// must.
func TestDocumentedTLSClusterIsValid(t *testing.T) {
	doc, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- cluster: xds-mtls -->\n```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/envoy.md has no cluster block marked xds-mtls")
	}
	var cluster map[string]any
	if err := yaml.Unmarshal(m[1], &cluster); err != nil {
		t.Fatal(err)
	}
	b := checkDocumented(t, "cluster", map[string]any{"clusters": []any{cluster}})
	c := b.GetStaticResources().GetClusters()[0]
	if !speaksHTTP2(c) || c.GetTransportSocket().GetName() != "envoy.transport_sockets.tls" {
		t.Errorf("cluster %s: HTTP/2 %v, transport socket %q", c.GetName(), speaksHTTP2(c), c.GetTransportSocket().GetName())
	}
}

// TestDocumentedLLMListenerIsValid: the HTTP connection manager of
// docs/llm.md is valid for Envoy, lists the decompressor after Sluice (so
// on the answer it runs first) and the router last, and lets streams last.
func TestDocumentedLLMListenerIsValid(t *testing.T) {
	var hcm map[string]any
	if err := yaml.Unmarshal(documentedBlock(t, "llm.md", "envoy: llm-listener"), &hcm); err != nil {
		t.Fatal(err)
	}
	checkListener(t, hcm)
	names := filterNames(hcm)
	if want := []string{"sluice-ratelimit", "envoy.filters.http.decompressor", "envoy.filters.http.router"}; !slices.Equal(names, want) {
		t.Errorf("http_filters %v, want %v: the decompressor after Sluice, so that it runs first on answers", names, want)
	}
	route := hcm["route_config"].(map[string]any)["virtual_hosts"].([]any)[0].(map[string]any)["routes"].([]any)[0].(map[string]any)["route"].(map[string]any)
	if route["timeout"] != "0s" || route["idle_timeout"] == nil {
		t.Errorf("route %v: want timeout 0s and an idle timeout, so streams are not cut", route)
	}
}

// TestDocumentedMetadataFiltersAreValid: the filters of docs/llm.md that
// write the metadata Sluice keys on (jwt_authn's verified claims,
// json_to_metadata's model) are valid for Envoy, come before Sluice, and
// write where the guide's policy reads.
func TestDocumentedMetadataFiltersAreValid(t *testing.T) {
	var filters []any
	if err := yaml.Unmarshal(documentedBlock(t, "llm.md", "envoy: llm-metadata"), &filters); err != nil {
		t.Fatal(err)
	}
	hcm := map[string]any{"stat_prefix": "llm", "http_filters": filters,
		"route_config": map[string]any{"virtual_hosts": []any{map[string]any{"name": "llm", "domains": []any{"*"},
			"routes": []any{map[string]any{"match": map[string]any{"prefix": "/"}, "route": map[string]any{"cluster": "llm"}}}}}}}
	checkListener(t, hcm)
	names := filterNames(hcm)
	if want := []string{"envoy.filters.http.jwt_authn", "envoy.filters.http.json_to_metadata", "sluice-ratelimit", "envoy.filters.http.router"}; !slices.Equal(names, want) {
		t.Errorf("http_filters %v, want %v: the filters that write the metadata before Sluice", names, want)
	}
	cfg := func(i int) map[string]any { return filters[i].(map[string]any)["typed_config"].(map[string]any) }
	if p := cfg(0)["providers"].(map[string]any)["idp"].(map[string]any); p["payload_in_metadata"] != "jwt_payload" {
		t.Errorf("jwt_authn writes the payload under %v, the policy reads jwt_payload", p["payload_in_metadata"])
	}
	rule := cfg(1)["request_rules"].(map[string]any)["rules"].([]any)[0].(map[string]any)["on_present"].(map[string]any)
	if rule["metadata_namespace"] != "envoy.filters.http.json_to_metadata" || rule["key"] != "model" || rule["type"] != "STRING" {
		t.Errorf("json_to_metadata writes %v, the policy reads a string at envoy.filters.http.json_to_metadata:model", rule)
	}
}

// documentedBlock returns the YAML block of docs/<page> marked
// "<!-- marker -->".
func documentedBlock(t *testing.T, page, marker string) []byte {
	t.Helper()
	doc, err := os.ReadFile("../../docs/" + page)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + " -->\n```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/%s has no block marked %q", page, marker)
	}
	return m[1]
}

// checkListener validates an HTTP connection manager as a listener's
// against Envoy's API, packed configurations included.
func checkListener(t *testing.T, hcm map[string]any) {
	t.Helper()
	hcm["@type"] = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	listener := map[string]any{"name": "llm", "address": map[string]any{"socket_address": map[string]any{"address": "0.0.0.0", "port_value": 10000}},
		"filter_chains": []any{map[string]any{"filters": []any{map[string]any{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}}}}}
	checkDocumented(t, "listener", map[string]any{"listeners": []any{listener}})
}

// checkDocumented parses static resources as a bootstrap's and validates
// them against Envoy's API, packed configurations included.
func checkDocumented(t *testing.T, what string, static map[string]any) *bootstrapv3.Bootstrap {
	t.Helper()
	boot, _ := json.Marshal(map[string]any{"static_resources": static})
	b, err := Parse(boot)
	if err != nil {
		t.Fatalf("the documented %s does not parse: %v", what, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Errorf("Envoy's validation: %v", err)
	}
	if errs := validateAnys(b.ProtoReflect(), ""); len(errs) > 0 {
		t.Errorf("the packed configs: %v", errs)
	}
	return b
}

func filterNames(hcm map[string]any) []string {
	var names []string
	for _, f := range hcm["http_filters"].([]any) {
		names = append(names, f.(map[string]any)["name"].(string))
	}
	return names
}
