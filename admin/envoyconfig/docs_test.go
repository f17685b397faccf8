package envoyconfig

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

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
	boot, _ := json.Marshal(map[string]any{"static_resources": map[string]any{"clusters": []any{cluster}}})
	b, err := Parse(boot)
	if err != nil {
		t.Fatalf("the documented cluster does not parse: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Errorf("Envoy's validation: %v", err)
	}
	if errs := validateAnys(b.ProtoReflect(), ""); len(errs) > 0 {
		t.Errorf("the packed configs: %v", errs)
	}
	c := b.GetStaticResources().GetClusters()[0]
	if !speaksHTTP2(c) || c.GetTransportSocket().GetName() != "envoy.transport_sockets.tls" {
		t.Errorf("cluster %s: HTTP/2 %v, transport socket %q", c.GetName(), speaksHTTP2(c), c.GetTransportSocket().GetName())
	}
}
