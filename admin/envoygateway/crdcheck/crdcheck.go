// Package crdcheck validates EnvoyExtensionPolicy and EnvoyPatchPolicy
// objects against the parts of Envoy Gateway's CRD schemas kept in
// ../testdata, for tests (the admin binary never imports it).
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

// schemas are the files in testdata of the kinds it has schemas of.
var schemas = map[string]string{
	"EnvoyExtensionPolicy": "envoyextensionpolicy.schema.json",
	"EnvoyPatchPolicy":     "envoypatchpolicy.schema.json",
}

// CheckAgainstCRD validates an EnvoyExtensionPolicy or EnvoyPatchPolicy
// (YAML or JSON) against the part of Envoy Gateway's CRD schema kept in
// testdata. For tests (this package's and the Helm chart's); it reads the
// schema from the source tree.
func CheckAgainstCRD(doc []byte) error {
	var head struct{ Kind string }
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	name, ok := schemas[head.Kind]
	if !ok {
		return fmt.Errorf("kind %q: no schema kept for it", head.Kind)
	}
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "testdata", name)
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
