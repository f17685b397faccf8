package filter

import (
	"math"
	"math/rand"
	"testing"

	"github.com/sluice-rl/sluice/shared/state"
)

// The fast codec must agree with shared/state: encodeBucket(b) is exactly
// state.EncodeBucket of b rounded to micro-units, and decodeBucket returns
// exactly what state.DecodeBucket returns.
func TestCodecMatchesState(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	vals := []float64{0, 1, -1, 0.5, 1e-7, -1e-7, 0.0000005, 19.9999995, 1700000000, 1700000000.123456,
		1700000000.1234565, 2000, 1e12, 9e9, 8.9e9, -8.9e9, 1e15, math.MaxFloat64, math.Inf(1), math.NaN(), -0.0}
	for i := 0; i < 20000; i++ {
		switch i % 4 {
		case 0:
			vals = append(vals, rng.Float64()*2000)
		case 1:
			vals = append(vals, 1.7e9+rng.Float64()*1e8)
		case 2:
			vals = append(vals, (rng.Float64()-0.5)*1e10)
		default:
			vals = append(vals, math.Float64frombits(rng.Uint64()))
		}
	}
	for i := 0; i+1 < len(vals); i++ {
		b := state.Bucket{Tokens: vals[i], LastRefill: math.Abs(vals[i+1])}
		got := string(encodeBucket(nil, b))
		tm, ok1 := toMicro(b.Tokens)
		lm, ok2 := toMicro(b.LastRefill)
		want := string(state.EncodeBucket(nil, b))
		if ok1 && ok2 {
			want = string(state.EncodeBucket(nil, state.Bucket{Tokens: float64(tm) / 1e6, LastRefill: float64(lm) / 1e6}))
		}
		if got != want {
			t.Fatalf("encodeBucket(%v, %v) = %q, want %q", b.Tokens, b.LastRefill, got, want)
		}
		checkDecode(t, []byte(got))
		checkDecode(t, state.EncodeBucket(nil, b))
	}
	for _, s := range []string{"", ":", "1:2", "1.000000:", ".000000:1.000000", "1.00000:2.000000", "1.0000000:2.000000",
		"-1.000000:-2.000000", "+1.000000:2.000000", "99999999999.999999:1.000000", "9007199254.740991:1.000000",
		"9007199254.740992:1.000000", "1.000000:2.000000x", "1.000000:2.000000:3.000000", "0001.000000:02.000000",
		"12345678901234567890.000000:1.000000", "1e5:1.000000", "NaN:1.000000", "1.00000a:1.000000"} {
		checkDecode(t, []byte(s))
	}
}

func checkDecode(t *testing.T, v []byte) {
	t.Helper()
	g, gerr := decodeBucket(v)
	w, werr := state.DecodeBucket(v)
	if (gerr == nil) != (werr == nil) || g != w && !(g.Tokens == 0 && w.Tokens == 0) {
		t.Fatalf("decodeBucket(%q) = %v, %v; state.DecodeBucket = %v, %v", v, g, gerr, w, werr)
	}
}

func FuzzCodec(f *testing.F) {
	f.Add([]byte("13.500000:1700000000.123456"))
	f.Add([]byte("-0.000001:0.000000"))
	f.Fuzz(func(t *testing.T, v []byte) {
		checkDecode(t, v)
	})
}
