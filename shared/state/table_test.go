package state

import (
	"bytes"
	"testing"
)

// slotDecoder is a Group.Find decode over slot records that counts calls.
func slotDecoder(calls *int) func([]byte) (uint64, []byte, bool) {
	return func(rec []byte) (uint64, []byte, bool) {
		*calls++
		s, err := DecodeSlot(rec)
		return s.Fingerprint, s.Identity, err == nil
	}
}

func groupOf(t *testing.T, overflow []byte, recs ...[]byte) *Group {
	t.Helper()
	var g Group
	if !g.Read(AppendGroupOverflow(nil, overflow, recs, len(recs), nil)[:]) {
		t.Fatal("a group built by AppendGroupOverflow does not read")
	}
	return &g
}

// Find returns the way with both the fingerprint and the identity, skips
// other fingerprints' binary records without decoding them, and gives -1
// for an identity that shares a fingerprint but not its name.
func TestGroupFindMatchesFingerprintAndIdentity(t *testing.T) {
	full := Bucket{Tokens: 10, LastRefill: 1}
	g := groupOf(t, nil,
		EncodeSlot(nil, 1, full, "alice"),
		nil,
		EncodeSlot(nil, 2, full, "bob"),
		EncodeSlot(nil, 2, full, "bobby"))
	calls := 0
	if got := g.Find(2, "bobby", slotDecoder(&calls)); got != 3 {
		t.Fatalf("Find bobby = %d, want way 3", got)
	}
	if calls != 2 {
		t.Errorf("decoded %d records, want 2 (alice's and the free way skipped)", calls)
	}
	calls = 0
	if got := g.Find(1, "mallory", slotDecoder(&calls)); got != -1 {
		t.Errorf("Find of another identity with alice's fingerprint = %d, want -1", got)
	}
	calls = 0
	if got := g.Find(3, "carol", slotDecoder(&calls)); got != -1 || calls != 0 {
		t.Errorf("Find carol = %d after %d decodes, want -1 after none", got, calls)
	}
}

// Claim takes a new way while the group has room, else the first free,
// undecodable or idle way (reporting a corrupt one), else none.
func TestGroupClaimFillsThenReusesIdleWays(t *testing.T) {
	rec := func(fp uint64, tokens float64) []byte {
		return EncodeSlot(nil, fp, Bucket{Tokens: tokens, LastRefill: 1}, "id")
	}
	idle := func(rec []byte) (bool, bool) {
		s, err := DecodeSlot(rec)
		return err == nil, err == nil && s.Bucket.Tokens >= 10
	}
	g := groupOf(t, nil, rec(1, 3), rec(2, 10))
	if way, isNew, _ := g.Claim(4, idle); way != 2 || !isNew {
		t.Errorf("room left: Claim = way %d new %v, want the new way 2", way, isNew)
	}
	if way, isNew, corrupt := g.Claim(2, idle); way != 1 || isNew || corrupt {
		t.Errorf("full group: Claim = way %d new %v corrupt %v, want the idle way 1", way, isNew, corrupt)
	}
	g = groupOf(t, nil, rec(1, 3), []byte("\x01garbage"), rec(2, 10))
	if way, _, corrupt := g.Claim(3, idle); way != 1 || !corrupt {
		t.Errorf("undecodable way: Claim = way %d corrupt %v, want way 1, corrupt", way, corrupt)
	}
	g = groupOf(t, nil, rec(1, 3), rec(2, 4))
	if way, _, corrupt := g.Claim(2, idle); way != -1 || corrupt {
		t.Errorf("every way active: Claim = way %d corrupt %v, want -1", way, corrupt)
	}
}

// Evict takes the way whose record ranks lowest, the first of equals, and
// none in a group without ways.
func TestGroupEvictTakesTheLowestRank(t *testing.T) {
	pool := func(tokens int64) []byte {
		return EncodePool(nil, uint64(tokens), Pool{Mode: PoolLease, Tokens: tokens}, []byte("id"))
	}
	tokens := func(rec []byte) int64 {
		s, err := DecodePool(rec)
		if err != nil {
			t.Fatalf("rank of an undecodable record %x", rec)
		}
		return s.Pool.Tokens
	}
	for _, c := range []struct {
		levels []int64
		want   int
	}{
		{[]int64{5, 3, 9, 4}, 1},
		{[]int64{2, 7, 2, 2}, 0},
		{[]int64{8, 8, 8, 1}, 3},
		{[]int64{6}, 0},
	} {
		var recs [][]byte
		for _, l := range c.levels {
			recs = append(recs, pool(l))
		}
		if got := groupOf(t, nil, recs...).Evict(tokens); got != c.want {
			t.Errorf("levels %v: Evict = way %d, want %d", c.levels, got, c.want)
		}
	}
	var empty Group
	if got := empty.Evict(tokens); got != -1 {
		t.Errorf("a group without ways: Evict = %d, want -1", got)
	}
}

// WithWay and WithOverflow write in place when the record keeps its
// length, and splice otherwise; both give the value ReplaceWay and
// ReplaceOverflow give.
func TestGroupWritesInPlaceOrSpliced(t *testing.T) {
	a := EncodeSlot(nil, 1, Bucket{Tokens: 1, LastRefill: 1}, "alice")
	b := EncodeSlot(nil, 2, Bucket{Tokens: 2, LastRefill: 1}, "bob")
	ovf := EncodeOverflow(nil, 1, Bucket{Tokens: 5, LastRefill: 1})
	for _, tc := range []struct {
		name    string
		at      int
		rec     []byte
		inPlace bool
	}{
		{"same length", 1, EncodeSlot(nil, 2, Bucket{Tokens: 7, LastRefill: 2}, "bob"), true},
		{"longer", 1, EncodeSlot(nil, 3, Bucket{Tokens: 7, LastRefill: 2}, "carol-the-long"), false},
		{"new way", 2, EncodeSlot(nil, 4, Bucket{Tokens: 7, LastRefill: 2}, "dave"), false},
	} {
		v := AppendGroupOverflow(nil, ovf, [][]byte{a, b}, 2, nil)
		want := ReplaceWay(nil, v, tc.at, tc.rec)
		var g Group
		g.Read(v)
		var buf []byte
		got := g.WithWay(&buf, tc.at, tc.rec)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: WithWay = %x, want %x", tc.name, got, want)
		}
		if inPlace := &got[0] == &v[0]; inPlace != tc.inPlace {
			t.Errorf("%s: written in place %v, want %v", tc.name, inPlace, tc.inPlace)
		}
	}
	v := AppendGroupOverflow(nil, ovf, [][]byte{a, b}, 2, nil)
	rec := EncodeOverflow(nil, 3, Bucket{Tokens: 1, LastRefill: 2})
	want := ReplaceOverflow(nil, v, rec)
	var g Group
	g.Read(v)
	var buf []byte
	if got := g.WithOverflow(&buf, rec); !bytes.Equal(got, want) || &got[0] != &v[0] {
		t.Errorf("WithOverflow = %x (in place %v), want %x in place", got, &got[0] == &v[0], want)
	}
	g.Read(AppendGroupOverflow(nil, ovf, [][]byte{a, b}, 2, nil))
	if got, want := g.WithoutOverflow(&buf, 0, b), AppendGroup(nil, [][]byte{a, b}, 0, b); !bytes.Equal(got, want) {
		t.Errorf("WithoutOverflow = %x, want %x", got, want)
	}
}

// A value that does not parse reads as an empty group, and Reset forgets
// the value.
func TestGroupReadRejectsAndResets(t *testing.T) {
	var g Group
	if g.Read([]byte{GroupFormat, 0xff}) || g.Len() != 0 || len(g.Value()) != 0 {
		t.Fatalf("a truncated group read as %d ways, value %x", g.Len(), g.Value())
	}
	g.Read(AppendGroup(nil, [][]byte{[]byte("x")}, 1, []byte("y")))
	if g.Len() != 2 || string(g.Way(1)) != "y" {
		t.Fatalf("read %d ways, way 1 %q", g.Len(), g.Way(1))
	}
	g.Reset()
	if g.Len() != 0 || g.Value() != nil || g.Overflow() != nil {
		t.Errorf("Reset left %d ways, value %x", g.Len(), g.Value())
	}
}

// FuzzGroup: whatever value was read, the table never panics, Find and
// Claim stay in range, and its writes hold the group ReplaceWay and
// ReplaceOverflow give (in place, a way's length keeps the encoding it was
// read with, so the group is compared, not the bytes).
func FuzzGroup(f *testing.F) {
	a := EncodeSlot(nil, 1, Bucket{Tokens: 1, LastRefill: 1}, "alice")
	b := EncodeSlot(nil, 2, Bucket{Tokens: 2, LastRefill: 1}, "bob")
	ovf := EncodeOverflow(nil, 1, Bucket{Tokens: 5, LastRefill: 1})
	f.Add(AppendGroupOverflow(nil, ovf, [][]byte{a, b}, 2, nil), a, uint8(1))
	f.Add(AppendGroup(nil, [][]byte{a, nil, b}, 3, nil), b, uint8(3))
	f.Add([]byte{GroupFormat, 0xff}, a, uint8(0))
	f.Add([]byte("0000000000000001:1:2:legacy"), ovf, uint8(0))
	f.Fuzz(func(t *testing.T, v, rec []byte, at uint8) {
		var g Group
		ok := g.Read(bytes.Clone(v))
		if !ok && g.Len() != 0 {
			t.Fatalf("a rejected value reads as %d ways", g.Len())
		}
		decode := func(r []byte) (uint64, []byte, bool) {
			s, err := DecodeSlot(r)
			return s.Fingerprint, s.Identity, err == nil
		}
		if w := g.Find(1, "alice", decode); w < -1 || w >= g.Len() {
			t.Fatalf("Find = %d of %d ways", w, g.Len())
		}
		idle := func(r []byte) (bool, bool) { _, err := DecodeSlot(r); return err == nil, false }
		if w, isNew, _ := g.Claim(Ways, idle); w < -1 || w > g.Len() || isNew != (w == g.Len()) {
			t.Fatalf("Claim = way %d new %v of %d ways", w, isNew, g.Len())
		}
		if len(rec) == 0 {
			return
		}
		way := int(at) % (g.Len() + 1)
		if g.Len() == Ways {
			way = int(at) % Ways
		}
		want := ReplaceWay(nil, g.Value(), way, rec)
		var buf []byte
		if got := g.WithWay(&buf, way, rec); !sameGroup(got, want) {
			t.Fatalf("WithWay(%d) = %x, want %x", way, got, want)
		}
		g.Read(bytes.Clone(v))
		want = ReplaceOverflow(nil, g.Value(), rec)
		if got := g.WithOverflow(&buf, rec); !sameGroup(got, want) {
			t.Fatalf("WithOverflow = %x, want %x", got, want)
		}
	})
}

// sameGroup reports whether two values read as the same ways and overflow
// record.
func sameGroup(x, y []byte) bool {
	var wx, wy [Ways][]byte
	nx, ox, ex := SplitGroupOverflow(x, &wx)
	ny, oy, ey := SplitGroupOverflow(y, &wy)
	if (ex != nil) != (ey != nil) || nx != ny || !bytes.Equal(ox, oy) || IsGroup(x) != IsGroup(y) {
		return false
	}
	for i := 0; i < nx; i++ {
		if !bytes.Equal(wx[i], wy[i]) {
			return false
		}
	}
	return true
}
