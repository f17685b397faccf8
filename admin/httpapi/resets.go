package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/web"
)

// Audit actions of resets: one client's state, or every client's of a
// rule.
const (
	ActionReset     = "client.reset"
	ActionResetRule = "rule.reset"
)

// recentResets is how many resets the API and the dashboard list.
const recentResets = 50

func (s *server) registerResets(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/resets", s.api(s.apiResets))
	mux.Handle("POST /api/v1/resets", s.api(s.apiReset))
	mux.Handle("POST /resets", s.page(s.resetSubmit))
}

type resetJSON struct {
	ID      string    `json:"id"`
	Rule    string    `json:"rule"`
	Key     string    `json:"key,omitempty"` // masked as the dashboard shows identities; none with All
	All     bool      `json:"all,omitempty"` // every identity of the rule
	Author  string    `json:"author"`
	Created time.Time `json:"created"`
}

// apiReset is POST /api/v1/resets {"rule", "key"} or {"rule", "all": true}.
func (s *server) apiReset(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Rule string `json:"rule"`
		Key  string `json:"key"`
		All  bool   `json:"all"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"rule", "key", "all"}); err != nil {
		return err
	}
	rs, m, err := s.reset(r, policies.ResetRequest{Rule: b.Rule, Key: b.Key, All: b.All, Author: apiAuthor(r, "")})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, m.json(rs)[0])
	return nil
}

// apiResets is GET /api/v1/resets: the recent resets, newest first.
func (s *server) apiResets(w http.ResponseWriter, r *http.Request) error {
	rs, err := s.Policies.Resets(r.Context(), recentResets)
	if err != nil {
		return err
	}
	out := map[string]any{"resets": newKeyMasker(s.currentConfig(r.Context())).json(rs...)}
	if n, ok := s.resetsInForce(); ok {
		out["envoys"] = map[string]int{"connected": n.connected, "with_latest": n.withLatest}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// envoysWithResets counts the connected Envoys, and those that ACKed the
// configuration pushed now.
type envoysWithResets struct{ connected, withLatest int }

// resetsInForce says how many connected Envoys have the latest resets:
// they ACKed the resource version pushed now, which carries them. ok is
// false when this admin pushes nothing, or nothing with resets.
func (s *server) resetsInForce() (n envoysWithResets, ok bool) {
	sv, isServing := s.Nodes.(ServingVersion)
	if !isServing {
		return n, false
	}
	cur := sv.Serving()
	if !strings.Contains(cur, "+resets.") {
		return n, false
	}
	for _, node := range s.Nodes.Nodes() {
		if node.Connected {
			n.connected++
			if node.AckedVersion == cur {
				n.withLatest++
			}
		}
	}
	return n, true
}

// reset resets a client (or every client of a rule) for the request's
// principal, within its scope, and records it in the audit log with the
// key masked; it returns the masker it used, for the answer.
func (s *server) reset(r *http.Request, req policies.ResetRequest) (policies.Reset, keyMasker, error) {
	req.Scope = scopeOf(principal(r))
	rs, err := s.Policies.Reset(r.Context(), req)
	if err != nil {
		return rs, keyMasker{}, err
	}
	m := newKeyMasker(s.currentConfig(r.Context()))
	if rs.All {
		s.record(r, store.AuditEntry{Action: ActionResetRule, Target: rs.Rule, Detail: fmt.Sprintf("reset every identity under %s (%s)", rs.Rule, rs.ID)})
	} else {
		s.record(r, store.AuditEntry{Action: ActionReset, Target: rs.Rule, Detail: fmt.Sprintf("reset %s under %s (%s)", m.mask(rs.Rule, rs.Key), rs.Rule, rs.ID)})
	}
	return rs, m, nil
}

// json is rs as the API answers them, keys masked.
func (m keyMasker) json(rs ...policies.Reset) []resetJSON {
	out := make([]resetJSON, len(rs))
	for i, r := range rs {
		out[i] = resetJSON{ID: r.ID, Rule: r.Rule, All: r.All, Author: r.Author, Created: r.Created.UTC()}
		if !r.All {
			out[i].Key = m.mask(r.Rule, r.Key)
		}
	}
	return out
}

// currentConfig is the current version parsed (nil if it cannot be read).
func (s *server) currentConfig(ctx context.Context) *policy.Config {
	cur, err := s.Policies.Current(ctx)
	if err != nil {
		return nil
	}
	cfg, _ := policy.Parse(cur.JSON)
	return cfg
}

// keyMasker shows reset keys as the dashboard shows identities: the
// values of sensitive sources (headers, JWT claims, ...) masked, unless
// the rule says "telemetry_identity": "clear".
type keyMasker struct{ cfg *policy.Config }

func newKeyMasker(cfg *policy.Config) keyMasker { return keyMasker{cfg} }

func (m keyMasker) mask(rule, key string) string {
	var r *policy.Rule
	if m.cfg != nil {
		r = m.cfg.RuleByName(rule)
	}
	if r == nil {
		return request.MaskValue(key) // a rule gone since: its sources are unknown
	}
	return request.DisplayIdentity(r.Keys, r.ClearIdentity, key)
}

// resettableRules are the rules of cfg whose state a reset can forget and
// whose policy sc allows, in the configuration's order.
func resettableRules(cfg *policy.Config, sc policies.Scope) []string {
	var out []string
	if cfg == nil {
		return nil
	}
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			if r.Action == policy.ActionLimit && r.Algorithm != policy.AlgorithmConcurrency && sc.Allows(p.Name) {
				out = append(out, r.Name)
			}
		}
	}
	return out
}

// resetPanel is the dashboard's "Reset a client" form and recent resets.
func (s *server) resetPanel(ctx context.Context, sess auth.Session) web.ResetPanel {
	p := sess.Principal()
	cfg := s.currentConfig(ctx)
	panel := web.ResetPanel{CSRF: sess.CSRF, CanReset: p.Role.Allows(auth.RoleEditor)}
	panel.Rules = resettableRules(cfg, scopeOf(p))
	if n, ok := s.resetsInForce(); ok {
		panel.InForce = fmt.Sprintf("The latest resets are in force on %d of %d connected Envoys.", n.withLatest, n.connected)
	}
	rs, err := s.Policies.Resets(ctx, recentResets)
	if err != nil {
		s.log.Error("listing the resets failed", "err", err)
	}
	m := newKeyMasker(cfg)
	for _, r := range rs {
		row := web.ResetRow{ID: r.ID, Rule: r.Rule, All: r.All, Author: r.Author, Created: timeText(r.Created)}
		if !r.All {
			row.Key = m.mask(r.Rule, r.Key)
		}
		panel.Recent = append(panel.Recent, row)
	}
	return panel
}

// resetSubmit is the dashboard form's POST /resets: the dashboard again,
// with the outcome above the form (the typed key and the box kept on a
// refusal). The box "every identity of the rule" (all) resets the whole
// rule; with a key typed too the form is refused, naming the key.
func (s *server) resetSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	rule, key, all := r.PostForm.Get("rule"), r.PostForm.Get("key"), r.PostForm.Get("all") != ""
	var rs policies.Reset
	var m keyMasker
	var err error
	if all && key != "" {
		err = &policies.InputError{Field: "key", Message: "leave it empty to reset every identity of the rule, or untick \"every identity of the rule\" to reset this one"}
	} else {
		rs, m, err = s.reset(r, policies.ResetRequest{Rule: rule, Key: key, All: all, Author: sess.Author})
	}
	status, flash := http.StatusOK, web.Flash{Kind: "ok"}
	var ie *policies.InputError
	var se *policies.ScopeError
	var ue *policies.UnavailableError
	switch {
	case err == nil && rs.All:
		flash.Text = fmt.Sprintf("Reset every identity under %s: each Envoy forgets the rule's state at the next push, within a few seconds.", rs.Rule)
		rule, key, all = rs.Rule, "", false
	case err == nil:
		flash.Text = fmt.Sprintf("Reset %s under %s: each Envoy forgets its state at the next push, within seconds.",
			m.mask(rs.Rule, rs.Key), rs.Rule)
		rule, key = rs.Rule, ""
	case errors.As(err, &ie):
		status, flash = http.StatusBadRequest, web.Flash{Kind: "error", Text: "Not reset: " + ie.Error()}
	case errors.As(err, &se):
		status, flash = http.StatusForbidden, web.Flash{Kind: "error", Text: "Not reset: " + se.Error()}
	case errors.As(err, &ue):
		status, flash = http.StatusServiceUnavailable, web.Flash{Kind: "error", Text: "Not reset: " + ue.Error()}
	default:
		return err
	}
	p, err := s.dashboardView(r, sess)
	if err != nil {
		return err
	}
	p.Reset = s.resetPanel(r.Context(), sess)
	p.Reset.Flash, p.Reset.Rule, p.Reset.Key, p.Reset.All = &flash, rule, key, all
	s.render(w, r, status, web.Dashboard(p))
	return nil
}
