package istiocrd

import (
	"strings"
	"testing"
)

const valid = `apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: x, namespace: istio-system}
spec:
  url: oci://registry.example.com/sluice/ratelimit-wasm:v1
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: public}]
  phase: AUTHZ
`

func TestCheckPassesAValidWasmPlugin(t *testing.T) {
	if err := Check([]byte(valid)); err != nil {
		t.Fatal(err)
	}
}

// The check can fail: each document breaks one rule of Istio's schema.
func TestCheckRefusesWhatIstiosSchemaRefuses(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"name: public}", "}", "name"},                                                       // a target needs a name
		{"phase: AUTHZ", "phase: LATE", "/spec/phase"},                                       // not a phase
		{"url: oci://registry.example.com/sluice/ratelimit-wasm:v1", `url: ""`, "/spec/url"}, // a module is required
		{"kind: Gateway, ", "kind: 1Gateway, ", "1Gateway"},                                  // not a kind
	} {
		doc := strings.Replace(valid, c.from, c.to, 1)
		if err := Check([]byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: %v, want an error with %q", c.from, c.to, err, c.want)
		}
	}
}
