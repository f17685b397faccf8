package state

import (
	"strings"
	"testing"
)

func TestSluiceIDsOfTwoIdentitiesDifferInBothHalves(t *testing.T) {
	a := string(AppendSluiceID(nil, "header:x=a"))
	if len(a) != SluiceIDLen {
		t.Fatalf("sluice_id %q has %d characters, want %d", a, len(a), SluiceIDLen)
	}
	b := string(AppendSluiceID(nil, "header:x=b"))
	if a == b || a[:16] == b[:16] || a[16:] == b[16:] {
		t.Fatalf("ids collide: %s %s", a, b)
	}
}

// The admin names an override's identity by SluiceIDOfKey; the filter
// builds the identity first (a long key is shortened) and then its id.
func TestSluiceIDOfKeyIsTheIDOfTheIdentityTheFilterBuilds(t *testing.T) {
	for _, key := range []string{"acme", "acme|GET", strings.Repeat("k", MaxIdentity), strings.Repeat("k", MaxIdentity+1)} {
		identity := AppendIdentity(nil, key)
		want := string(AppendSluiceID(nil, string(identity)))
		if got := SluiceIDOfKey(key); got != want {
			t.Errorf("key of %d bytes: SluiceIDOfKey %s, the filter's %s", len(key), got, want)
		}
	}
	long := strings.Repeat("k", MaxIdentity+1)
	if SluiceIDOfKey(long) == string(AppendSluiceID(nil, long)) {
		t.Error("a long key's id is the id of the key itself, not of the identity the filter stores")
	}
}
