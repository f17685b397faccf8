package httpapi

import (
	"net/http"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
)

// scopeOf returns the policies p may change (policies.Scope): an editor's
// scope, or every policy for an admin. A stored scope that no longer
// parses allows nothing rather than everything.
func scopeOf(p auth.Principal) policies.Scope {
	if p.Policies == "" || p.Role.Allows(auth.RoleAdmin) {
		return nil
	}
	sc, err := policies.ParseScope(p.Policies)
	if err != nil || !sc.Restricted() {
		return policies.Scope{""}
	}
	return sc
}

// checkScope refuses, with a *policies.ScopeError, a draft to be
// based on version base that changes policies outside the scope of r's
// principal. An invalid draft passes: saving it reports why.
func (s *server) checkScope(r *http.Request, base int64, draft []byte) error {
	sc := scopeOf(principal(r))
	if !sc.Restricted() {
		return nil
	}
	norm, err := policies.Validate(draft)
	if err != nil {
		return nil
	}
	raw := s.Policies
	if m, ok := raw.(maskingPolicies); ok { // compare with the secrets as stored
		raw = m.Policies
	}
	v, err := raw.Get(r.Context(), base)
	if err != nil {
		return err
	}
	before, err := policies.Validate(v.JSON)
	if err != nil {
		return err
	}
	return policies.CheckScope(sc, before, norm)
}
