package simulate

import (
	"strconv"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
)

// sources reads the request's attributes as the filter's requestSources
// does (plugin/filter/keys.go), with the same shared/request helpers: an
// absent or empty value is missing.
type sources struct {
	req    Request
	hops   int
	jwt    request.Claims
	jwtOK  bool
	jwtSet bool
}

func newSources(cfg *policy.Config, req Request) *sources {
	return &sources{req: req, hops: cfg.TrustedHops}
}

func (s *sources) header(name string) (string, bool) {
	v, ok := s.req.Headers[name]
	return v, ok
}

// get returns a source's value and whether it is present.
func (s *sources) get(k policy.KeySource) (string, bool) {
	v, ok := s.raw(k)
	if v == "" {
		return "", false
	}
	return v, ok
}

func (s *sources) raw(k policy.KeySource) (string, bool) {
	switch k.Kind {
	case policy.SourceHeader:
		return s.header(k.Name)
	case policy.SourceQuery:
		return request.QueryParam(s.req.Path, k.Name)
	case policy.SourceJWT:
		if !s.jwtSet {
			s.jwtSet = true
			if authz, ok := s.header("authorization"); ok {
				s.jwtOK = request.ParseJWT(authz, &s.jwt)
			}
		}
		if !s.jwtOK {
			return "", false
		}
		return s.jwt.Claim(k.Name)
	case policy.SourcePath:
		return request.PathOnly(s.req.Path), true
	case policy.SourceMethod:
		return s.req.Method, true
	case policy.SourceHost:
		return request.LowerASCII(s.req.Host), true
	case policy.SourcePeer:
		return s.req.PeerPrincipal, s.req.PeerPrincipal != ""
	case policy.SourceRoute:
		return s.req.Route, s.req.Route != ""
	case policy.SourceCluster:
		return s.req.Cluster, s.req.Cluster != ""
	case policy.SourceConnection:
		return s.req.Connection, s.req.Connection != ""
	case policy.SourceAll:
		return policy.AllValue, true
	case policy.SourceCookie:
		if h, ok := s.header("cookie"); ok {
			return request.CookieValue(h, k.Name)
		}
		return "", false
	case policy.SourceMetadata:
		v, ok := s.req.metadataValue(k.Name)
		return request.MetadataText(v), ok
	case policy.SourceIPNetwork:
		ip, ok := s.get(policy.KeySource{Kind: policy.SourceIP})
		if !ok {
			return "", false
		}
		v4, v6 := k.NetworkBits()
		n, ok := request.AppendNetwork(nil, ip, v4, v6)
		return string(n), ok
	case policy.SourceIP:
		if s.hops > 0 {
			if xff, ok := s.header("x-forwarded-for"); ok {
				if ip, ok := request.XFFClient(xff, s.hops); ok {
					return ip, true
				}
			}
		}
		return request.StripPort(s.req.ClientAddress), s.req.ClientAddress != ""
	}
	return "", false
}

// mismatch returns why a rule's match does not hold ("" when it holds).
// The values of sources that may carry secrets (headers, query
// parameters, claims, cookies) are not repeated.
func (s *sources) mismatch(r *policy.Rule) string {
	for i := range r.Match {
		m := &r.Match[i]
		v, ok := s.get(m.Source)
		if request.CompileMatch(m).Holds(v, ok) {
			continue
		}
		want := "match " + m.Source.String() + " wants " + m.Cond.String()
		if !ok {
			return want + "; the request has no value"
		}
		shown := strconv.Quote(v)
		if request.Sensitive(m.Source.Kind) {
			shown = "another value"
		}
		return want + "; the request has " + shown
	}
	return ""
}
