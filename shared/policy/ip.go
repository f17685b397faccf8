package policy

import (
	"strconv"
	"strings"
)

// DefaultNetworkBits are the prefix lengths of "ip:network": an IPv4
// address's /24 and an IPv6 address's /64, the block one household, office
// or host usually has (an IPv6 client can change its address within its
// /64 at will).
const DefaultNetworkBits = "24:64"

// parseNetworkBits reads the "<v4 bits>:<v6 bits>" of "ip:network:...",
// "" for the defaults, into its canonical form.
func parseNetworkBits(s string) (string, string) {
	if s == "" {
		return DefaultNetworkBits, ""
	}
	v4s, v6s, ok := strings.Cut(s, ":")
	v4, err4 := strconv.Atoi(v4s)
	v6, err6 := strconv.Atoi(v6s)
	switch {
	case !ok || err4 != nil || err6 != nil:
		return "", `needs the prefix lengths as "ip:network:<IPv4 bits>:<IPv6 bits>", e.g. "ip:network:24:64" (the default, also written "ip:network")`
	case v4 < 1 || v4 > 32:
		return "", "has an IPv4 prefix length of " + strconv.Itoa(v4) + "; it must be 1 to 32"
	case v6 < 1 || v6 > 128:
		return "", "has an IPv6 prefix length of " + strconv.Itoa(v6) + "; it must be 1 to 128"
	}
	return strconv.Itoa(v4) + ":" + strconv.Itoa(v6), ""
}

// NetworkBits are the prefix lengths of an "ip:network" source.
func (k KeySource) NetworkBits() (v4, v6 int) {
	a, b, _ := strings.Cut(k.Name, ":")
	v4, _ = strconv.Atoi(a)
	v6, _ = strconv.Atoi(b)
	return v4, v6
}
