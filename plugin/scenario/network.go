package scenario

// "ip:network" keys a rule by the client's network, the address masked
// to a prefix (IPv4 /24, IPv6 /64 by default): the addresses of one
// network share a bucket, as an IPv6 client that changes its address
// within its /64 would otherwise escape its limit.

import "testing"

func init() {
	register(Case{Name: "NetworkKeySharesABucketPerClientNetwork", Run: networkKey})
}

func networkKey(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"xff_trusted_hops": 1, "rules": [{"name": "per-net", "limit_keys": ["ip:network"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 2}}]}`)
	from := func(addr string) Request { return req("@ip", "192.0.2.1:1000", "x-forwarded-for", addr) }
	for _, c := range []struct {
		addr, why string
		admitted  bool
	}{
		{"203.0.113.5", "the first of its /24", true},
		{"203.0.113.77", "a second address of the same /24", true},
		{"203.0.113.200", "a third: the /24's burst of 2 is spent", false},
		{"203.0.114.1", "another /24", true},
		{"2001:db8:1:2::1", "an IPv6 client", true},
		{"2001:db8:1:2:ffff:eeee:dddd:9", "another address of its /64", true},
		{"2001:db8:1:2::abcd", "a third address of that /64", false},
		{"2001:db8:1:3::1", "the next /64", true},
	} {
		res := do(t, h, from(c.addr))
		if res.Rejected == c.admitted {
			t.Fatalf("%s (%s): rejected %v", c.addr, c.why, res.Rejected)
		}
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.per-net.allowed": 6, "sluice.rule.per-net.rejected": 2})
	// Without an address there is no network: the rule does not apply.
	if res := do(t, h, req("@ip", "", "x-forwarded-for", "")); res.Rejected {
		t.Fatal("a request without a client address was limited")
	}
}
