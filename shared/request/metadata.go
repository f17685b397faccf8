package request

import (
	"math"
	"strconv"
)

// AppendMetadataText appends the text of a value of Envoy's dynamic
// metadata, as proxy_get_property hands it over, to dst. Envoy passes a
// string as its bytes, but a number (a Struct's numbers are doubles) as its
// 8 bytes, little-endian, and a bool as one byte, 0 or 1. Those become
// their JSON text, as a jwt: claim's are: 2 is "2", 0.5 "0.5", true
// "true". So a policy matches a numeric claim on "2", a cost reads as a
// number, and the dashboard shows text.
//
// A string cannot always be told from a number: 8 bytes that are all
// printable are taken as the string they spell, 8 others as a double (a
// string of 8 bytes with a control character or a byte above 0x7e is not
// text anyone keys on, and a whole number's or a short decimal's double
// has a zero byte or one above 0x7e). One byte 0 or 1 is a bool.
func AppendMetadataText(dst, v []byte) []byte {
	switch {
	case !NeedsMetadataText(v):
		return append(dst, v...)
	case len(v) == 1:
		return strconv.AppendBool(dst, v[0] == 1)
	}
	var bits uint64
	for i := 7; i >= 0; i-- {
		bits = bits<<8 | uint64(v[i])
	}
	return appendJSONNumber(dst, math.Float64frombits(bits))
}

// MetadataText is AppendMetadataText for a string.
func MetadataText(v string) string {
	return string(AppendMetadataText(nil, []byte(v)))
}

// NeedsMetadataText reports whether AppendMetadataText would change v.
func NeedsMetadataText(v []byte) bool {
	return len(v) == 1 && v[0] <= 1 || len(v) == 8 && !printable(v)
}

func printable(v []byte) bool {
	for _, c := range v {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// appendJSONNumber appends f as encoding/json writes a float64: whole
// numbers below 1e21 without a fraction or exponent, others in the
// shortest form that reads back the same.
func appendJSONNumber(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.AppendFloat(dst, f, 'g', -1, 64) // not JSON; never a valid cost
	}
	abs := math.Abs(f)
	if abs < 1e21 && (abs >= 1e-6 || f == 0) {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	n := len(dst)
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	if e := dst[n:]; len(e) >= 4 && e[len(e)-4] == 'e' && e[len(e)-3] == '-' && e[len(e)-2] == '0' {
		dst[len(dst)-2] = dst[len(dst)-1] // "1e-07" is "1e-7" in JSON
		dst = dst[:len(dst)-1]
	}
	return dst
}
