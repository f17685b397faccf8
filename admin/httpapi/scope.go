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

// checkScope refuses, with a *policies.ScopeError, a draft to be based on
// version base that changes policies outside the scope of r's principal.
// The service compares with the version as stored (secrets unmasked).
func (s *server) checkScope(r *http.Request, base int64, draft []byte) error {
	return s.Policies.CheckScope(r.Context(), scopeOf(principal(r)), base, draft)
}
