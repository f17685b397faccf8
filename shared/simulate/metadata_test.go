package simulate

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestMetadataValuesAreEnvoysEncoding: a value of the dynamic metadata
// reads as Envoy hands it to the filter, in the simulator and in the
// properties a test host gets alike: a string as itself, a number as its 8
// bytes, a bool as one byte; null, an object and an absent key are
// missing.
func TestMetadataValuesAreEnvoysEncoding(t *testing.T) {
	r := Request{Metadata: map[string]map[string]any{"envoy.filters.http.jwt_authn": {"jwt_payload": map[string]any{
		"sub": "alice", "tier": 2.0, "admin": true, "email": nil, "org": map[string]any{"id": "o1"},
		"groups": []any{"dev", "ops"}}}}}
	var two [8]byte
	binary.LittleEndian.PutUint64(two[:], math.Float64bits(2))
	props := r.Properties()
	for key, want := range map[string]string{"sub": "alice", "tier": string(two[:]), "admin": "\x01", "org.id": "o1", "email": "", "org": "", "absent": "",
		"groups.1": "ops", "groups.2": "", "groups": ""} {
		got, ok := r.metadataValue("envoy.filters.http.jwt_authn:jwt_payload." + key)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", key, got, ok, want)
		}
		prop, ok := props["metadata.filter_metadata.envoy.filters.http.jwt_authn.jwt_payload."+key]
		if string(prop) != want || ok != (want != "") {
			t.Errorf("%s: the host's property %q %v, want %q", key, prop, ok, want)
		}
	}
	if _, ok := r.metadataValue("other:sub"); ok {
		t.Error("another namespace has a value")
	}
}
