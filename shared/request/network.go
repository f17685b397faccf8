package request

import "net/netip"

// AppendNetwork appends the network of the client address ip (as the
// "ip:address" source gives it, without a port) to dst: the address
// masked to v4 bits (IPv4, and IPv4 mapped into IPv6) or v6 bits (IPv6),
// written as the prefix, "203.0.113.0/24" or "2001:db8:1:2::/64". ok is
// false, and dst unchanged, when ip is not an address.
func AppendNetwork(dst []byte, ip string, v4, v6 int) ([]byte, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return dst, false
	}
	a = a.Unmap().WithZone("")
	bits := v6
	if a.Is4() {
		bits = v4
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return dst, false
	}
	return p.AppendTo(dst), true
}
