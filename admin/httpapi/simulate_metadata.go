package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// simMetadata reads a simulated request's Envoy dynamic metadata: a JSON
// object whose keys are namespaces (the filters' names) and whose values
// are objects, as Envoy's filter_metadata holds them. Absent or null: none.
func simMetadata(raw json.RawMessage) (map[string]map[string]any, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	if len(raw) > maxSimMetadata {
		return nil, simInputError("metadata", fmt.Sprintf("is %d bytes; at most %d are allowed here", len(raw), maxSimMetadata))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, simInputError("metadata", `must be a JSON object of namespaces, e.g. {"envoy.filters.http.jwt_authn": {"jwt_payload": {"sub": "alice"}}}`)
	}
	out := make(map[string]map[string]any, len(top))
	for _, ns := range sortedKeys(top) {
		var st map[string]any
		if err := json.Unmarshal(top[ns], &st); err != nil || st == nil {
			return nil, simInputError("metadata."+shortText(ns), "must be a JSON object: the metadata that filter writes")
		}
		out[ns] = st
	}
	return out, nil
}
