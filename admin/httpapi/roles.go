package httpapi

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
)

// adminPaths are the areas only admins use, reads included: accounts, API
// tokens and settings (the telemetry token).
var adminPaths = []string{
	"/api/v1/users", "/api/v1/tokens", "/api/v1/telemetry/token",
	"/users", "/tokens", "/telemetry/token",
}

// readOnlyPosts are POST routes that change nothing, open to viewers.
var readOnlyPosts = map[string]bool{
	"/api/v1/policy/validate":  true,
	"/api/v1/policy/simulate":  true, // evaluates a request; stores nothing
	"/simulate":                true,
	"/api/v1/policy/migrate":   true, // converts; stores nothing
	"/policy/migrate":          true, // converts; its save (op=save) checks the editor role itself
	"/logout":                  true,
	"/api/v1/policy/tests/run": true, // runs tests; stores nothing
	"/tests/run":               true,
	"/policy/test":             true,
}

// requiredRole is the role a request needs. Deny by default: every method
// but GET and HEAD needs an editor, unless listed in readOnlyPosts, so a
// new route that changes something is closed to viewers without a word.
func requiredRole(method, path string) auth.Role {
	for _, p := range adminPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return auth.RoleAdmin
		}
	}
	if method == http.MethodGet || method == http.MethodHead || (method == http.MethodPost && readOnlyPosts[path]) {
		return auth.RoleViewer
	}
	return auth.RoleEditor
}

func forbiddenMessage(p auth.Principal, need auth.Role) string {
	return "your role (" + string(p.Role) + ") may not do this; it needs the " + string(need) + " role"
}

type principalKey struct{}

func withPrincipal(r *http.Request, p auth.Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// principal is who makes the request (set by api and page).
func principal(r *http.Request) auth.Principal {
	p, _ := r.Context().Value(principalKey{}).(auth.Principal)
	return p
}

// clientAddr is the request's client address: the peer, or, when the peer
// is a trusted proxy, the last address in X-Forwarded-For that is not one.
func (s *server) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !s.trusted(peer) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if !s.trusted(a) {
			return a.Unmap().String()
		}
	}
	return host
}

func (s *server) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
