// Package istiocrd validates WasmPlugin objects against the CRD schema
// that istio.io/api ships (the version go.mod requires), for tests: the
// admin binary never imports it. Istio's CEL rules (one of selector or
// targetRefs, no namespace in a target) are not evaluated; admin/istio
// checks those itself.
package istiocrd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// CRDName is the WasmPlugin CRD's name in istio.io/api's file.
const CRDName = "wasmplugins.extensions.istio.io"

var compiled = sync.OnceValues(compile)

// Check validates a WasmPlugin (YAML or JSON) against the v1alpha1 schema
// of the WasmPlugin CRD.
func Check(doc []byte) error {
	s, err := compiled()
	if err != nil {
		return err
	}
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// compile finds istio.io/api in the module cache (go list), reads its
// CRDs and compiles the WasmPlugin's schema.
func compile() (*jsonschema.Schema, error) {
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api").Output()
	if err != nil {
		return nil, fmt.Errorf("finding istio.io/api (go list -m): %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "kubernetes", "customresourcedefinitions.gen.yaml"))
	if err != nil {
		return nil, err
	}
	schema, err := wasmPluginSchema(raw)
	if err != nil {
		return nil, err
	}
	sch, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("wasmplugin.json", sch); err != nil {
		return nil, err
	}
	return c.Compile("wasmplugin.json")
}

// wasmPluginSchema returns the WasmPlugin's v1alpha1 openAPIV3Schema, as
// JSON, from the multi-document CRD file.
func wasmPluginSchema(crds []byte) ([]byte, error) {
	for _, d := range bytes.Split(crds, []byte("\n---\n")) {
		var crd struct {
			Metadata struct{ Name string }
			Spec     struct {
				Versions []struct {
					Name   string
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					}
				}
			}
		}
		if yaml.Unmarshal(d, &crd) != nil || crd.Metadata.Name != CRDName {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == "v1alpha1" {
				y, err := yaml.Marshal(v.Schema.OpenAPIV3Schema)
				if err != nil {
					return nil, err
				}
				return yaml.YAMLToJSON(y)
			}
		}
	}
	return nil, errors.New("no v1alpha1 schema of " + CRDName + " in istio.io/api")
}
