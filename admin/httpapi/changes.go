package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/web"
)

// Reviewed changes (docs/admin.md "Reviewed changes"): with
// -require-review, every save becomes a change another person approves.
// The API answers a save 202 with the change; /api/v1/changes and the
// Changes page list and decide them.

// Audit actions of reviewed changes.
const (
	ActionPropose  = "policy.propose"
	ActionApprove  = "policy.approve"
	ActionReject   = "policy.reject"
	ActionWithdraw = "policy.withdraw"
)

func (s *server) registerChanges(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/changes", s.api(s.apiChanges))
	mux.Handle("GET /api/v1/changes/{id}", s.api(s.apiChange))
	mux.Handle("POST /api/v1/changes/{id}/approve", s.api(s.apiApprove))
	mux.Handle("POST /api/v1/changes/{id}/reject", s.api(s.apiDecide(ActionReject)))
	mux.Handle("POST /api/v1/changes/{id}/withdraw", s.api(s.apiDecide(ActionWithdraw)))
	mux.Handle("GET /changes", s.page(s.changesPage))
	mux.Handle("GET /changes/{id}", s.page(s.changePage))
	mux.Handle("POST /changes/{id}/approve", s.page(s.approveSubmit))
	mux.Handle("POST /changes/{id}/reject", s.page(s.decideSubmit(ActionReject)))
	mux.Handle("POST /changes/{id}/withdraw", s.page(s.decideSubmit(ActionWithdraw)))
}

// changeJSON is a change in API answers.
type changeJSON struct {
	ID        int64  `json:"id"`
	Base      int64  `json:"base_version"`
	Author    string `json:"author"`
	Message   string `json:"message"`
	Created   string `json:"created"`
	State     string `json:"state"`
	DecidedBy string `json:"decided_by,omitempty"`
	Decided   string `json:"decided,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Version   int64  `json:"version,omitempty"`
	WithTests bool   `json:"with_tests,omitempty"`
	// Stale: open on a base that is no longer the current version, so an
	// approval would be refused (409) until its author proposes it again.
	Stale bool   `json:"stale,omitempty"`
	URL   string `json:"url"`
}

// toChangeJSON is c for the API; current is the current version number.
func toChangeJSON(c policies.Change, current int64) changeJSON {
	out := changeJSON{ID: c.ID, Base: c.Base, Author: c.Author, Message: c.Message, Created: isoTime(c.Created), State: c.State,
		DecidedBy: c.DecidedBy, Reason: c.Reason, Version: c.Version, WithTests: c.Tests != nil, URL: "/api/v1/changes/" + i64s(c.ID),
		Stale: staleBy(c, current) > 0}
	if !c.Decided.IsZero() {
		out.Decided = isoTime(c.Decided)
	}
	return out
}

func i64s(n int64) string { return strconv.FormatInt(n, 10) }

// changeID reads the {id} of a change's path.
func changeID(r *http.Request) (int64, error) {
	n, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || n <= 0 {
		return 0, &policies.InputError{Field: "id", Message: fmt.Sprintf("%q is not a change number", r.PathValue("id"))}
	}
	return n, nil
}

func (s *server) apiChanges(w http.ResponseWriter, r *http.Request) error {
	limit := 0
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return &policies.InputError{Field: "limit", Message: fmt.Sprintf("%q is not a positive number", l)}
		}
		limit = n
	}
	cs, err := s.Policies.Changes(r.Context(), r.URL.Query().Get("state"), limit)
	if err != nil {
		return err
	}
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	out := []changeJSON{}
	for _, c := range cs {
		out = append(out, toChangeJSON(c, cur.Number))
	}
	body := map[string]any{"review_required": s.Policies.ReviewRequired(), "changes": out}
	if sc := s.Policies.ReviewPolicies(); s.Policies.ReviewRequired() && sc.Restricted() {
		body["review_policies"] = []string(sc)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

func (s *server) apiChange(w http.ResponseWriter, r *http.Request) error {
	id, err := changeID(r)
	if err != nil {
		return err
	}
	c, err := s.Policies.Change(r.Context(), id)
	if err != nil {
		return err
	}
	hunks, err := s.changeDiff(r, c)
	if err != nil {
		return err
	}
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	out := map[string]any{"change": toChangeJSON(c, cur.Number), "policy": jsonRaw(c.JSON), "diff": policies.Unified("v"+i64s(c.Base), "change "+i64s(c.ID), hunks)}
	if c.Tests != nil {
		out["tests"] = *c.Tests
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// changeDiff is what change c changes against its base version.
func (s *server) changeDiff(r *http.Request, c policies.Change) ([]policies.Hunk, error) {
	old := ""
	if c.Base > 0 {
		base, err := s.Policies.Get(r.Context(), c.Base)
		if err != nil {
			return nil, err
		}
		old = base.Pretty()
	}
	return policies.LineDiff(old, policies.Pretty(c.JSON)), nil
}

func (s *server) apiApprove(w http.ResponseWriter, r *http.Request) error {
	id, err := changeID(r)
	if err != nil {
		return err
	}
	var b struct {
		SkipTests bool `json:"skip_tests"`
	}
	if err := s.decodeOptionalJSON(w, r, &b, []string{"skip_tests"}); err != nil {
		return err
	}
	v, err := s.approve(r, id, apiAuthor(r, ""), b.SkipTests)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/policy/versions/"+i64s(v.Number))
	writeJSON(w, http.StatusCreated, toJSON(v, true))
	return nil
}

// decodeOptionalJSON is decodeJSON for a body that may be left out.
func (s *server) decodeOptionalJSON(w http.ResponseWriter, r *http.Request, dst any, fields []string) error {
	if r.ContentLength == 0 {
		return nil
	}
	return s.decodeJSON(w, r, dst, fields)
}

// approve approves change id as reviewer and records it.
func (s *server) approve(r *http.Request, id int64, reviewer string, skipTests bool) (policies.Version, error) {
	v, err := s.Policies.Approve(r.Context(), policies.ReviewRequest{ID: id, Reviewer: reviewer, Scope: scopeOf(principal(r)), SkipTests: skipTests})
	if err != nil {
		return v, err
	}
	s.record(r, store.AuditEntry{Action: ActionApprove, Target: "change " + i64s(id), Version: v.Number, FromVersion: v.Parent,
		Detail: saveDetail(v.Message, skipTests)})
	return v, nil
}

// apiDecide rejects or withdraws a change.
func (s *server) apiDecide(action string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := changeID(r)
		if err != nil {
			return err
		}
		var b struct {
			Reason string `json:"reason"`
		}
		if err := s.decodeOptionalJSON(w, r, &b, []string{"reason"}); err != nil {
			return err
		}
		c, err := s.decide(r, action, id, apiAuthor(r, ""), b.Reason)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, toChangeJSON(c, c.Base)) // closed: never stale
		return nil
	}
}

// decide rejects or withdraws change id and records it.
func (s *server) decide(r *http.Request, action string, id int64, who, reason string) (policies.Change, error) {
	req := policies.ReviewRequest{ID: id, Reviewer: who, Reason: reason}
	var c policies.Change
	var err error
	if action == ActionReject {
		c, err = s.Policies.Reject(r.Context(), req)
	} else {
		c, err = s.Policies.Withdraw(r.Context(), req)
	}
	if err != nil {
		return c, err
	}
	s.record(r, store.AuditEntry{Action: action, Target: "change " + i64s(id), FromVersion: c.Base, Detail: c.Reason})
	return c, nil
}

// reviewError maps the review's errors: a proposal (202, recorded), a
// missing change (404), a decided one (409), one's own (403). Others are
// returned as they are.
func (s *server) reviewError(r *http.Request, err error) (status int, body map[string]any, ok bool) {
	var (
		pe *policies.ProposedError
		nf *policies.ChangeNotFoundError
		cc *policies.ChangeClosedError
		se *policies.SelfReviewError
	)
	switch {
	case errors.As(err, &pe):
		s.recordProposal(r, pe.Change)
		return http.StatusAccepted, map[string]any{"proposed": toChangeJSON(pe.Change, pe.Change.Base), "message": pe.Error()}, true
	case errors.As(err, &nf):
		return http.StatusNotFound, map[string]any{"error": nf.Error()}, true
	case errors.As(err, &cc):
		return http.StatusConflict, map[string]any{"error": cc.Error(), "change": toChangeJSON(cc.Change, cc.Change.Base)}, true
	case errors.As(err, &se):
		return http.StatusForbidden, map[string]any{"error": se.Error()}, true
	}
	return 0, nil, false
}

func (s *server) recordProposal(r *http.Request, c policies.Change) {
	s.record(r, store.AuditEntry{Action: ActionPropose, Actor: c.Author, Target: "change " + i64s(c.ID), FromVersion: c.Base, Detail: c.Message})
}

// changeInfo is a change on a page.
// staleBy is the current version when c is open on an older base (0
// otherwise): approving it would be refused.
func staleBy(c policies.Change, current int64) int64 {
	if c.State != store.ChangeOpen || c.Base == current {
		return 0
	}
	return current
}

func changeInfo(c policies.Change, current int64) web.ChangeInfo {
	out := web.ChangeInfo{ID: c.ID, Base: c.Base, Author: c.Author, Message: c.Message, Created: timeText(c.Created), CreatedISO: isoTime(c.Created),
		State: c.State, DecidedBy: c.DecidedBy, Reason: c.Reason, Version: c.Version, WithTests: c.Tests != nil, StaleBy: staleBy(c, current)}
	if !c.Decided.IsZero() {
		out.Decided = timeText(c.Decided)
	}
	return out
}

func (s *server) changesPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	open, err := s.Policies.Changes(r.Context(), store.ChangeOpen, 0)
	if err != nil {
		return err
	}
	all, err := s.Policies.Changes(r.Context(), "", 50)
	if err != nil {
		return err
	}
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	p := web.ChangesPage{Nav: nav(sess, "changes"), Required: s.Policies.ReviewRequired(), Only: s.Policies.ReviewPolicies().String()}
	for _, c := range open {
		p.Open = append(p.Open, changeInfo(c, cur.Number))
	}
	for _, c := range all {
		if c.State != store.ChangeOpen {
			p.Decided = append(p.Decided, changeInfo(c, cur.Number))
		}
	}
	s.render(w, r, http.StatusOK, web.Changes(p))
	return nil
}

// changeView is change id's page.
func (s *server) changeView(r *http.Request, sess auth.Session, id int64) (web.ChangePage, error) {
	c, err := s.Policies.Change(r.Context(), id)
	if err != nil {
		return web.ChangePage{}, err
	}
	hunks, err := s.changeDiff(r, c)
	if err != nil {
		return web.ChangePage{}, err
	}
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return web.ChangePage{}, err
	}
	p := web.ChangePage{Nav: nav(sess, "changes"), Change: changeInfo(c, cur.Number), Current: cur.Number, Mine: sess.Author == c.Author,
		CanReview: sess.Role.Allows(auth.RoleEditor), Diff: diffView("v"+i64s(c.Base), "change "+i64s(c.ID), hunks)}
	if c.Tests != nil {
		p.Tests = *c.Tests
	}
	return p, nil
}

func (s *server) changePage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	id, err := changeID(r)
	if err != nil {
		return err
	}
	p, err := s.changeView(r, sess, id)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("proposed") != "" && p.Change.State == store.ChangeOpen {
		p.Flashes = []web.Flash{{Kind: "ok", Text: "Proposed as change " + i64s(id) + ": another editor approves it here, which saves and pushes it."}}
	}
	s.render(w, r, http.StatusOK, web.Change(p))
	return nil
}

func (s *server) approveSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	id, err := changeID(r)
	if err != nil {
		return err
	}
	v, err := s.approve(r, id, sess.Author, r.PostForm.Get("skip_tests") == "on")
	if err == nil {
		http.Redirect(w, r, "/?saved="+i64s(v.Number), http.StatusSeeOther)
		return nil
	}
	p, verr := s.changeView(r, sess, id)
	if verr != nil {
		return verr
	}
	status, body, ok := s.reviewError(r, err)
	var tf *policies.TestsFailedError
	switch {
	case ok:
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not approved: " + fmt.Sprint(body["error"])}}
	case errors.As(err, &tf):
		status = http.StatusUnprocessableEntity
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not approved: " + tf.Error() + "."}}
		p.TestReport = reportView("change "+i64s(id), tf.Revision, tf.Report)
	case errors.As(err, new(*policies.ConflictError)), refused(err) != 0, errors.As(err, new(*policies.ValidationError)):
		status = max(http.StatusConflict, refused(err))
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not approved: " + err.Error()}}
	default:
		return err
	}
	s.render(w, r, status, web.Change(p))
	return nil
}

func (s *server) decideSubmit(action string) func(http.ResponseWriter, *http.Request, auth.Session) error {
	return func(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
		id, err := changeID(r)
		if err != nil {
			return err
		}
		_, err = s.decide(r, action, id, sess.Author, r.PostForm.Get("reason"))
		if err == nil {
			http.Redirect(w, r, "/changes/"+i64s(id), http.StatusSeeOther)
			return nil
		}
		p, verr := s.changeView(r, sess, id)
		if verr != nil {
			return verr
		}
		status, body, ok := s.reviewError(r, err)
		var ie *policies.InputError
		switch {
		case ok:
			p.Flashes = []web.Flash{{Kind: "error", Text: fmt.Sprint(body["error"])}}
		case errors.As(err, &ie):
			status = http.StatusBadRequest
			p.Flashes = []web.Flash{{Kind: "error", Text: ie.Message}}
		default:
			return err
		}
		s.render(w, r, status, web.Change(p))
		return nil
	}
}

// jsonRaw is a stored configuration as JSON in an answer.
func jsonRaw(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// isoTime is a time in answers and datetime attributes.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }
