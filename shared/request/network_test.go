package request

import (
	"net/netip"
	"testing"
)

func TestAppendNetworkMasksTheAddress(t *testing.T) {
	for _, c := range []struct {
		ip     string
		v4, v6 int
		want   string
		ok     bool
	}{
		{"203.0.113.77", 24, 64, "203.0.113.0/24", true},
		{"203.0.113.77", 32, 128, "203.0.113.77/32", true},
		{"203.0.113.77", 16, 64, "203.0.0.0/16", true},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 24, 64, "2001:db8:1:2::/64", true},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 24, 48, "2001:db8:1::/48", true},
		{"::ffff:203.0.113.77", 24, 64, "203.0.113.0/24", true}, // mapped: the IPv4 mask
		{"fe80::1%eth0", 24, 64, "fe80::/64", true},
		{"not an address", 24, 64, "", false},
		{"", 24, 64, "", false},
	} {
		got, ok := AppendNetwork([]byte("x"), c.ip, c.v4, c.v6)
		if ok != c.ok || (ok && string(got) != "x"+c.want) || (!ok && string(got) != "x") {
			t.Errorf("%q /%d /%d: %q %v, want %q %v", c.ip, c.v4, c.v6, got, ok, c.want, c.ok)
		}
	}
}

// FuzzAppendNetwork: whatever the address, the network is a prefix that
// holds it, or nothing.
func FuzzAppendNetwork(f *testing.F) {
	f.Add("203.0.113.77", 24, 64)
	f.Add("2001:db8::1", 1, 128)
	f.Add("::ffff:1.2.3.4", 32, 1)
	f.Fuzz(func(t *testing.T, ip string, v4, v6 int) {
		if v4 < 1 || v4 > 32 || v6 < 1 || v6 > 128 {
			return // the policy parser allows no other lengths
		}
		out, ok := AppendNetwork(nil, ip, v4, v6)
		if !ok {
			return
		}
		p, err := netip.ParsePrefix(string(out))
		if err != nil {
			t.Fatalf("%q: %q is not a prefix: %v", ip, out, err)
		}
		a, _ := netip.ParseAddr(ip)
		if !p.Contains(a.Unmap().WithZone("")) || p != p.Masked() {
			t.Fatalf("%q: %s does not hold it, or is not masked", ip, p)
		}
	})
}
