package simulate

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Envoy's dynamic metadata, for "metadata:" sources. Envoy hands the filter
// a value of google.protobuf.Struct serialized as its CEL value: a string
// as its bytes, a number (always a double in a Struct) as its 8 bytes
// little-endian, a bool as one byte; a null cannot be serialized (the
// filter sees no value). metadataValue gives the same bytes, so keys and
// matches agree with the filter's.
//
// A key of digits picks an element of a list, as in Envoy. A path that ends
// on an object or a list counts as missing here; Envoy would pass it
// serialized as a header map, which no policy should key on.

// metadataValue returns the value at a metadata source's path.
func (r *Request) metadataValue(name string) (string, bool) {
	path := policy.MetadataPath(name)[2:] // namespace, keys
	st, ok := r.Metadata[path[0]]
	if !ok {
		return "", false
	}
	var v any = st
	for _, k := range path[1:] {
		switch x := v.(type) {
		case map[string]any:
			if v, ok = x[k]; !ok {
				return "", false
			}
		case []any: // Envoy reads a key of a list as an index
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	return encodeMetadataLeaf(v)
}

// encodeMetadataLeaf is Envoy's serialization of a Struct leaf.
func encodeMetadataLeaf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
		return string(b[:]), true
	case bool:
		if x {
			return "\x01", true
		}
		return "\x00", true
	}
	return "", false
}

// addMetadataProperties adds the leaves under prefix to a test host's
// properties (dotted paths), encoded as Envoy encodes them; a list's
// elements by index.
func addMetadataProperties(p map[string][]byte, prefix string, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			addMetadataProperties(p, prefix+"."+k, e)
		}
	case []any:
		for i, e := range x {
			addMetadataProperties(p, prefix+"."+strconv.Itoa(i), e)
		}
	default:
		if s, ok := encodeMetadataLeaf(v); ok {
			p[prefix] = []byte(s)
		}
	}
}
