// Package crdcheck validates EnvoyExtensionPolicy objects against the part of
// Envoy Gateway's CRD schema kept in ../testdata, for tests (the admin binary
// never imports it).
package crdcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// CheckAgainstCRD validates an EnvoyExtensionPolicy (YAML or JSON)
// against the part of Envoy Gateway's CRD schema kept in testdata. For
// tests (this package's and the Helm chart's); it reads the schema from
// the source tree.
func CheckAgainstCRD(doc []byte) error {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "testdata", "envoyextensionpolicy.schema.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sch, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("eep.json", sch); err != nil {
		return err
	}
	s, err := c.Compile("eep.json")
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
	if err := s.Validate(v); err != nil {
		return err
	}
	var probe any
	return json.Unmarshal(j, &probe)
}
