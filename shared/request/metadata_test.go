package request

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestMetadataTextIsWhatAJSONClaimWouldRead: numbers and bools that Envoy
// hands over in binary read as their JSON text; strings stay themselves.
func TestMetadataTextIsWhatAJSONClaimWouldRead(t *testing.T) {
	double := func(f float64) string {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(f))
		return string(b[:])
	}
	for v, want := range map[string]string{
		double(2):        "2",
		double(0.5):      "0.5",
		double(-3):       "-3",
		double(1e9):      "1000000000",
		double(1e21):     "1e+21",
		double(0):        "0",
		double(1e-7):     "1e-7",
		double(1.5e-300): "1.5e-300",
		"\x01":           "true",
		"\x00":           "false",
		"alice":          "alice",
		"12345678":       "12345678", // printable: a string
		"gold-pro":       "gold-pro",
		"\x02":           "\x02", // one byte, not a bool
		"":               "",
		"abc\x00defgh!":  "abc\x00defgh!", // not 8 bytes
	} {
		if got := MetadataText(v); got != want {
			t.Errorf("MetadataText(%q) = %q, want %q", v, got, want)
		}
		if changed := NeedsMetadataText([]byte(v)); changed != (MetadataText(v) != v) {
			t.Errorf("NeedsMetadataText(%q) = %v", v, changed)
		}
	}
}

func FuzzMetadataText(f *testing.F) {
	f.Add([]byte("alice"))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0x40})
	f.Add([]byte{1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		out := AppendMetadataText([]byte("x"), v)
		if string(out[:1]) != "x" {
			t.Fatal("the prefix was overwritten")
		}
		if !NeedsMetadataText(v) && string(out[1:]) != string(v) {
			t.Fatalf("%q changed to %q", v, out[1:])
		}
	})
}
