package httpapi

import (
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/sluice-rl/sluice/admin/policies"
)

// FuzzClientAddr: whatever X-Forwarded-For says, the client address is the
// peer or a well-formed address from the header, and only behind a
// trusted proxy.
func FuzzClientAddr(f *testing.F) {
	for _, s := range [][2]string{
		{"10.0.0.1:1", "203.0.113.1"}, {"10.0.0.1:1", "1.1.1.1, 10.0.0.2"}, {"192.0.2.1:1", "203.0.113.1"},
		{"[::1]:1", "::ffff:1.2.3.4"}, {"10.0.0.1:1", ",,,"}, {"junk", "junk"},
	} {
		f.Add(s[0], s[1])
	}
	s := &server{Config: Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}}
	f.Fuzz(func(t *testing.T, remote, xff string) {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		got := s.clientAddr(r)
		r.Header.Del("X-Forwarded-For")
		peer := s.clientAddr(r)
		if got == peer {
			return
		}
		a, err := netip.ParseAddr(got)
		if err != nil || s.trusted(a) {
			t.Fatalf("clientAddr(%q, %q) = %q: not the peer %q, nor an untrusted address", remote, xff, got, peer)
		}
		if pa, err := netip.ParseAddr(peer); err != nil || !s.trusted(pa) {
			t.Fatalf("an untrusted peer %q was replaced by %q", peer, got)
		}
	})
}

// FuzzAuditFilter: any query either parses or is refused with an error
// naming its field; it never panics.
func FuzzAuditFilter(f *testing.F) {
	for _, q := range []string{"", "actor=ann&action=policy.", "since=2026-01-02&until=2026-01-03T00:00:00Z", "before=5&limit=10", "limit=-1", "since=x", "before=99999999999999999999"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		r, _ := http.NewRequest("GET", "/api/v1/audit?"+url.PathEscape(q), nil)
		r.URL.RawQuery = q
		fl, err := auditFilter(r)
		var ie *policies.InputError
		switch {
		case err == nil:
			if fl.Before < 0 || fl.Limit < 0 {
				t.Fatalf("%q parsed to a negative number: %+v", q, fl)
			}
		case !errors.As(err, &ie) || ie.Field == "":
			t.Fatalf("%q: %v is not an error naming a field", q, err)
		}
	})
}
