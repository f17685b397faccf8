package main

import (
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestAccountFlags(t *testing.T) {
	t.Setenv("SLUICE_AUDIT_RETENTION", "")
	t.Setenv("SLUICE_TRUSTED_PROXIES", "")
	o, err := parseOptions([]string{"-audit-retention", "30d", "-trusted-proxies", "10.0.0.0/8, 192.0.2.7,2001:db8::/32"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("2001:db8::/32")}
	if o.AuditRetention != 30*24*time.Hour || len(o.TrustedProxies) != 3 {
		t.Fatalf("retention %v, proxies %v", o.AuditRetention, o.TrustedProxies)
	}
	for i, p := range want {
		if o.TrustedProxies[i] != p {
			t.Errorf("proxy %d = %v, want %v", i, o.TrustedProxies[i], p)
		}
	}
	if o, err := parseOptions(nil, io.Discard); err != nil || o.AuditRetention != DefaultAuditRetention {
		t.Errorf("default retention: %v %v", o.AuditRetention, err)
	}
	if o, err := parseOptions([]string{"-audit-retention", "48h"}, io.Discard); err != nil || o.AuditRetention != 48*time.Hour {
		t.Errorf("48h: %v %v", o.AuditRetention, err)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"-audit-retention", "12h"}},
		{[]string{"-audit-retention", "xd"}},
		{[]string{"-audit-retention", "-3d"}},
		{[]string{"-trusted-proxies", "10.0.0.0/33"}},
		{[]string{"-trusted-proxies", "proxy.local"}},
	} {
		_, err := parseOptions(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.args[0]) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.args[0])
		}
	}
}
