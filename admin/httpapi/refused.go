package httpapi

import (
	"errors"
	"net/http"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/web"
)

// refused is the status of a change the admin refuses whatever it holds:
// one outside its author's scope (403), or one to a policy that follows a
// file (409: the file decides; docs/admin.md "A policy kept in Git"); 0
// for other errors.
func refused(err error) int {
	switch {
	case errors.As(err, new(*policies.ScopeError)):
		return http.StatusForbidden
	case errors.As(err, new(*policies.ManagedError)):
		return http.StatusConflict
	}
	return 0
}

// follows is the policy page's view of the file the policy follows, nil
// when it follows none.
func (s *server) follows() *web.FileFollow {
	st, ok := s.Policies.FileStatus()
	if !ok {
		return nil
	}
	f := &web.FileFollow{Path: st.Policy, Tests: st.Tests, Version: st.Version, Checked: timeText(st.Checked), Err: st.Err}
	if len(st.SHA256) >= 12 {
		f.SHA256 = st.SHA256[:12]
	}
	return f
}
