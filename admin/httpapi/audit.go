package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/web"
)

// Audit actions.
const (
	ActionLogin           = "login"
	ActionLoginFailed     = "login.failed"
	ActionLogout          = "logout"
	ActionLockout         = "auth.lockout"
	ActionSave            = "policy.save"
	ActionRollback        = "policy.rollback"
	ActionTrialStart      = "trial.start"
	ActionTrialEnd        = "trial.end"
	ActionTrialPromote    = "trial.promote"
	ActionUserCreate      = "user.create"
	ActionUserUpdate      = "user.update"
	ActionUserDelete      = "user.delete"
	ActionTokenCreate     = "token.create"
	ActionTokenRevoke     = "token.revoke"
	ActionTelemetryRotate = "settings.telemetry_token"
)

// record appends an audit entry for r: the time, the principal (unless
// e.Actor is set) and the client address are filled in. A failure to
// write is logged, not returned: the change it describes has happened.
func (s *server) record(r *http.Request, e store.AuditEntry) {
	if s.Audit == nil {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.Actor == "" {
		e.Actor = principal(r).Name
	}
	if e.Remote == "" {
		e.Remote = s.clientAddr(r)
	}
	if err := s.Audit.AppendAudit(r.Context(), e); err != nil {
		s.log.Error("writing the audit log failed", "action", e.Action, "err", err)
	}
}

// failed counts a failed authentication by method ("password", "token",
// "bearer") from addr for account, records a failed login (not a bad
// bearer token: those are counted, and their lockouts recorded), and
// records every lockout the failure started.
func (s *server) failed(r *http.Request, method, addr, account string, who auth.Principal) {
	s.failedWhy(r, method, "by "+method, addr, account, who)
}

// failedWhy is failed with the audit entry's detail (why it failed).
func (s *server) failedWhy(r *http.Request, method, detail, addr, account string, who auth.Principal) {
	if method != "bearer" {
		s.record(r, store.AuditEntry{Action: ActionLoginFailed, Actor: who.Name, Remote: addr, Target: account, Detail: detail})
	}
	for _, scope := range s.Throttle.Fail(method, addr, account) {
		target := addr
		if scope == auth.ScopeAccountAddress {
			target = account + " from " + addr
		}
		s.log.Warn("authentication locked after repeated failures", "scope", scope, "remote", addr, "account", account)
		s.record(r, store.AuditEntry{Action: ActionLockout, Actor: who.Name, Remote: addr, Target: target,
			Detail: "locked (" + scope + ") after repeated failures by " + method})
	}
}

// apiAuthor is the author of an API change: the user, or for the admin
// token the request's "author" field (default "api").
func apiAuthor(r *http.Request, field string) string {
	p := principal(r)
	switch {
	case !p.AdminToken:
		return p.Name
	case field != "":
		return field
	}
	return "api"
}

// auditFilter reads the filters of GET /api/v1/audit and GET /audit:
// actor, action (a prefix when it ends in "."), remote, since, until (RFC
// 3339 or a date), before (an entry id, for paging), limit.
func auditFilter(r *http.Request) (store.AuditFilter, error) {
	q := r.URL.Query()
	f := store.AuditFilter{Actor: q.Get("actor"), Action: q.Get("action"), Remote: q.Get("remote")}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(t.name)
		if v == "" {
			continue
		}
		tm, err := time.Parse(time.RFC3339, v)
		if err != nil {
			if tm, err = time.Parse(time.DateOnly, v); err != nil {
				return f, &policies.InputError{Field: t.name, Message: fmt.Sprintf("%q is not a time; use RFC 3339 (2026-01-02T15:04:05Z) or a date (2026-01-02)", v)}
			}
		}
		*t.dst = tm
	}
	for _, n := range []struct {
		name string
		set  func(int64)
	}{{"before", func(v int64) { f.Before = v }}, {"limit", func(v int64) { f.Limit = int(v) }}} {
		v := q.Get(n.name)
		if v == "" {
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 0 {
			return f, &policies.InputError{Field: n.name, Message: fmt.Sprintf("%q is not a non-negative integer", v)}
		}
		n.set(x)
	}
	return f, nil
}

type auditJSON struct {
	ID          int64     `json:"id"`
	At          time.Time `json:"at"`
	Actor       string    `json:"actor"`
	Action      string    `json:"action"`
	Remote      string    `json:"remote"`
	Target      string    `json:"target,omitempty"`
	Detail      string    `json:"detail,omitempty"`
	Version     int64     `json:"version,omitempty"`
	FromVersion int64     `json:"from_version,omitempty"`
	Diff        string    `json:"diff,omitempty"` // the API path of the version's diff
}

// apiAudit is GET /api/v1/audit: entries newest first, next_before to page.
func (s *server) apiAudit(w http.ResponseWriter, r *http.Request) error {
	f, es, err := s.listAudit(r)
	if err != nil {
		return err
	}
	out := struct {
		Entries    []auditJSON `json:"entries"`
		NextBefore int64       `json:"next_before,omitempty"`
	}{Entries: []auditJSON{}, NextBefore: nextBefore(es, f)}
	for _, e := range es {
		j := auditJSON{ID: e.ID, At: e.At.UTC(), Actor: e.Actor, Action: e.Action, Remote: e.Remote, Target: e.Target,
			Detail: e.Detail, Version: e.Version, FromVersion: e.FromVersion}
		if e.Version > 0 {
			j.Diff = fmt.Sprintf("/api/v1/policy/diff?from=%d&to=%d", diffBase(e), e.Version)
		}
		out.Entries = append(out.Entries, j)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// diffBase is the version an entry's change is compared with: the base of
// a save, the version before a rollback (its new number minus one).
func diffBase(e store.AuditEntry) int64 {
	if e.Action == ActionSave && e.FromVersion > 0 {
		return e.FromVersion
	}
	return e.Version - 1
}

// listAudit reads the request's filters and the entries they select.
func (s *server) listAudit(r *http.Request) (store.AuditFilter, []store.AuditEntry, error) {
	f, err := auditFilter(r)
	if err != nil || s.Audit == nil {
		return f, nil, err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	es, err := s.Audit.ListAudit(r.Context(), f)
	return f, es, err
}

func nextBefore(es []store.AuditEntry, f store.AuditFilter) int64 {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	if len(es) < min(limit, store.MaxAuditPage) || len(es) == 0 {
		return 0
	}
	return es[len(es)-1].ID
}

// auditPage is GET /audit: the filters as a form, the entries, paging.
func (s *server) auditPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	f, es, err := s.listAudit(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	p := web.AuditPage{Nav: nav(sess, "audit"), Enabled: s.Audit != nil,
		Actor: f.Actor, Action: f.Action, Remote: f.Remote, Since: q.Get("since"), Until: q.Get("until")}
	for _, e := range es {
		v := web.AuditView{At: timeText(e.At), Actor: e.Actor, Action: e.Action, Remote: e.Remote, Target: e.Target, Detail: e.Detail}
		if e.Version > 0 {
			v.Version = e.Version
			v.DiffURL = fmt.Sprintf("/history/%d?against=%d", e.Version, diffBase(e))
		}
		p.Entries = append(p.Entries, v)
	}
	if nb := nextBefore(es, f); nb > 0 {
		q.Set("before", strconv.FormatInt(nb, 10))
		p.OlderURL = "/audit?" + q.Encode()
	}
	s.render(w, r, http.StatusOK, web.Audit(p))
	return nil
}
