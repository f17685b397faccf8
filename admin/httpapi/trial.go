package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/admin/trial"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/web"
)

// Trials runs shadow trials of drafts (admin/trial.Service implements it).
type Trials interface {
	StartOn(ctx context.Context, base int64, draft []byte, d time.Duration, author string) (trial.Trial, error)
	Running() (trial.Trial, bool)
	Stop(ctx context.Context) error
	Promote(ctx context.Context, author, message string) (policies.Version, error)
}

// MinTrialDuration is the shortest trial the API and the page accept.
const MinTrialDuration = time.Second

func (s *server) registerTrial(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/trial", s.api(s.apiTrial))
	mux.Handle("POST /api/v1/trial", s.api(s.apiTrialStart))
	mux.Handle("POST /api/v1/trial/end", s.api(s.apiTrialEnd))
	mux.Handle("POST /api/v1/trial/promote", s.api(s.apiTrialPromote))
	mux.Handle("GET /trial", s.page(s.trialPage))
	mux.Handle("POST /trial", s.page(s.trialStartSubmit))
	mux.Handle("POST /trial/end", s.page(s.trialEndSubmit))
	mux.Handle("POST /trial/promote", s.page(s.trialPromoteSubmit))
}

// parseTrialDuration reads a duration field: a Go duration ("15m",
// "90s"); "" is trial.DefaultDuration.
func parseTrialDuration(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return trial.DefaultDuration, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < MinTrialDuration || d > trial.MaxDuration {
		return 0, &policies.InputError{Field: "duration", Message: fmt.Sprintf("%q is not a duration between %v and %v (e.g. 15m)", v, MinTrialDuration, trial.MaxDuration)}
	}
	return d, nil
}

// noTrials answers when the admin runs no trial service (no xDS server).
var errNoTrials = &apiErr{status: http.StatusNotFound, msg: "trials need the xDS server: this admin runs with -xds-listen off"}

var errNoTrial = &apiErr{status: http.StatusConflict, msg: trial.ErrNoTrial.Error(), extra: map[string]any{"running": false}}

// startTrial restores masked secrets from the current version (the draft
// came from a masked page or API answer) and starts the trial.
func (s *server) startTrial(r *http.Request, base int64, draft []byte, d time.Duration, author string) (trial.Trial, error) {
	ctx := r.Context()
	if policy.HasMaskedSecret(draft) {
		cur, err := s.Policies.(maskingPolicies).Policies.Current(ctx)
		if err != nil {
			return trial.Trial{}, err
		}
		restored, err := policy.RestoreSecrets(draft, cur.JSON)
		if err != nil {
			var es policy.Errors
			errors.As(err, &es)
			return trial.Trial{}, &policies.ValidationError{Errors: es}
		}
		draft = restored
	}
	// A trial changes nothing that is enforced, but promoting it would:
	// a draft outside the author's scope is refused before it is tried.
	if err := s.checkScope(r, base, draft); err != nil {
		return trial.Trial{}, err
	}
	return s.Trials.StartOn(ctx, base, draft, d, author)
}

// trialError maps a refused start (another trial runs) to 409.
func trialError(err error) error {
	var re *trial.RunningError
	if errors.As(err, &re) {
		return &apiErr{status: http.StatusConflict, msg: re.Error(), extra: map[string]any{"running": trialJSON(re.Running, nil)}}
	}
	if errors.Is(err, trial.ErrNoTrial) {
		return errNoTrial
	}
	return err
}

func (s *server) apiTrialStart(w http.ResponseWriter, r *http.Request) error {
	if s.Trials == nil {
		return errNoTrials
	}
	var b struct {
		Policy      json.RawMessage `json:"policy"`
		BaseVersion int64           `json:"base_version"`
		Duration    string          `json:"duration"`
		Author      string          `json:"author"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"policy", "base_version", "duration", "author"}); err != nil {
		return err
	}
	if b.BaseVersion < 0 {
		return &policies.InputError{Field: "base_version", Message: "not a version number"}
	}
	if len(b.Policy) == 0 || string(b.Policy) == "null" {
		return &policies.InputError{Field: "policy", Message: "required: the draft configuration, a JSON object"}
	}
	d, err := parseTrialDuration(b.Duration)
	if err != nil {
		return err
	}
	t, err := s.startTrial(r, b.BaseVersion, b.Policy, d, apiAuthor(r, b.Author))
	if err != nil {
		return trialError(err)
	}
	s.recordTrialStart(r, t)
	writeJSON(w, http.StatusCreated, trialJSON(t, nil))
	return nil
}

func (s *server) recordTrialStart(r *http.Request, t trial.Trial) {
	s.record(r, store.AuditEntry{Action: ActionTrialStart, Target: "trial " + strconv.FormatInt(t.ID, 10), FromVersion: t.Base,
		Detail: fmt.Sprintf("%d rule%s in shadow until %s", len(t.Pairs), plural(len(t.Pairs)), timeText(t.Ends))})
}

func (s *server) apiTrial(w http.ResponseWriter, r *http.Request) error {
	if s.Trials == nil {
		return errNoTrials
	}
	t, ok := s.Trials.Running()
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{"running": false})
		return nil
	}
	cmp := s.compareTrial(t)
	writeJSON(w, http.StatusOK, trialJSON(t, &cmp))
	return nil
}

func (s *server) endTrial(r *http.Request) (trial.Trial, error) {
	if s.Trials == nil {
		return trial.Trial{}, errNoTrials
	}
	t, ok := s.Trials.Running()
	if !ok {
		return t, errNoTrial
	}
	if err := s.Trials.Stop(r.Context()); err != nil {
		return t, trialError(err)
	}
	s.record(r, store.AuditEntry{Action: ActionTrialEnd, Target: "trial " + strconv.FormatInt(t.ID, 10), FromVersion: t.Base,
		Detail: "ended early; the current version was pushed again"})
	return t, nil
}

func (s *server) apiTrialEnd(w http.ResponseWriter, r *http.Request) error {
	t, err := s.endTrial(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"running": false, "ended": t.ID})
	return nil
}

func (s *server) promoteTrial(r *http.Request, author, message string) (policies.Version, trial.Trial, error) {
	if s.Trials == nil {
		return policies.Version{}, trial.Trial{}, errNoTrials
	}
	t, ok := s.Trials.Running()
	if !ok {
		return policies.Version{}, t, errNoTrial
	}
	// Promoting saves the draft: the promoter's scope applies, whoever
	// started the trial.
	if err := s.checkScope(r, t.Base, t.Draft); err != nil {
		return policies.Version{}, t, err
	}
	v, err := s.Trials.Promote(r.Context(), author, message)
	if err != nil {
		return v, t, trialError(err)
	}
	s.record(r, store.AuditEntry{Action: ActionTrialPromote, Target: "trial " + strconv.FormatInt(t.ID, 10), Version: v.Number, FromVersion: t.Base,
		Detail: v.Message})
	return maskVersion(v), t, nil
}

func (s *server) apiTrialPromote(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Message string `json:"message"`
		Author  string `json:"author"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"message", "author"}); err != nil {
		return err
	}
	v, _, err := s.promoteTrial(r, apiAuthor(r, b.Author), b.Message)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/policy/versions/"+strconv.FormatInt(v.Number, 10))
	writeJSON(w, http.StatusCreated, toJSON(v, true))
	return nil
}

// trialRuleJSON compares one draft rule with the current rule of the same
// name over the last telemetry.RateWindow.
type trialRuleJSON struct {
	Rule      string           `json:"rule"`       // the draft's (and the current policy's) name
	TrialRule string           `json:"trial_rule"` // the name it runs under
	Current   *telemetry.Rates `json:"current"`    // nil: no node reports the current rule (new in the draft, or no traffic yet)
	Draft     *telemetry.Rates `json:"draft"`      // nil: no node reports the trial rule yet
}

// trialIdentityJSON is an identity the draft would reject that the current
// policy admits, from the hottest buckets the nodes report.
type trialIdentityJSON struct {
	Rule          string `json:"rule"`
	Identity      string `json:"identity"` // masked as on the dashboard
	RecentRejects uint64 `json:"recent_rejects"`
	Nodes         int    `json:"nodes"`
}

type trialComparison struct {
	Telemetry  bool                `json:"telemetry"` // false: the admin has no telemetry; no rates
	Rules      []trialRuleJSON     `json:"rules"`
	Identities []trialIdentityJSON `json:"identities"`
}

func trialJSON(t trial.Trial, cmp *trialComparison) map[string]any {
	pairs := make([]map[string]string, len(t.Pairs))
	for i, p := range t.Pairs {
		pairs[i] = map[string]string{"rule": p.Draft, "trial_rule": p.Trial}
	}
	m := map[string]any{
		"running": true, "id": t.ID, "author": t.Author, "base_version": t.Base, "over_version": t.Over,
		"started": t.Started.UTC(), "ends": t.Ends.UTC(), "rules": pairs,
		"draft": json.RawMessage(policy.MaskSecrets(t.Draft)),
	}
	if cmp != nil {
		m["telemetry"] = cmp.Telemetry
		m["comparison"] = cmp.Rules
		m["identities"] = cmp.Identities
	}
	return m
}

// compareTrial reads the telemetry: each draft rule's rates beside the
// current rule's, and the identities whose trial bucket rejected in the
// last minute while the current rule's bucket for the same identity did
// not (only the hottest buckets reach the admin: see docs/admin.md).
func (s *server) compareTrial(t trial.Trial) trialComparison {
	out := trialComparison{Rules: []trialRuleJSON{}, Identities: []trialIdentityJSON{}}
	if s.Telemetry == nil {
		for _, p := range t.Pairs {
			out.Rules = append(out.Rules, trialRuleJSON{Rule: p.Draft, TrialRule: p.Trial})
		}
		return out
	}
	out.Telemetry = true
	ov := s.Telemetry.State.Overview(s.now(), telemetry.OverviewOptions{TopN: 1000})
	rates := map[string]telemetry.Rates{}
	for _, rv := range ov.Rules {
		rates[rv.Name] = rv.Rates
	}
	find := func(name string) *telemetry.Rates {
		if r, ok := rates[name]; ok {
			return &r
		}
		return nil
	}
	draftOf := map[string]string{}
	for _, p := range t.Pairs {
		out.Rules = append(out.Rules, trialRuleJSON{Rule: p.Draft, TrialRule: p.Trial, Current: find(p.Draft), Draft: find(p.Trial)})
		draftOf[p.Trial] = p.Draft
	}
	rejectedNow := map[[2]string]bool{}
	for _, k := range ov.TopKeys {
		if k.Recent > 0 {
			rejectedNow[[2]string{k.Rule, k.Identity}] = true
		}
	}
	for _, k := range ov.TopKeys {
		rule, ok := draftOf[k.Rule]
		if !ok || k.Recent == 0 || rejectedNow[[2]string{rule, k.Identity}] {
			continue
		}
		out.Identities = append(out.Identities, trialIdentityJSON{Rule: rule, Identity: k.Identity, RecentRejects: k.Recent, Nodes: k.Nodes})
	}
	return out
}

// trialStartSubmit is POST /trial: the editor's "Try in shadow" button.
// An invalid draft or a running trial shows the editor again with the
// draft kept and the reason.
func (s *server) trialStartSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	f := r.PostForm
	p, _, err := s.submittedDraft(r, sess)
	if err != nil {
		return err
	}
	draft := p.Draft
	p.TrialDuration = f.Get("trial_duration")
	refuse := func(status int, text string) error {
		p.Flashes = []web.Flash{{Kind: "error", Text: "Trial not started: " + text}}
		s.render(w, r, status, web.Editor(p))
		return nil
	}
	if s.Trials == nil {
		return refuse(http.StatusNotFound, errNoTrials.msg)
	}
	d, err := parseTrialDuration(f.Get("trial_duration"))
	if err != nil {
		return refuse(http.StatusBadRequest, err.Error())
	}
	base, err := parseVersion(f.Get("base_version"), "base_version")
	if err != nil {
		return refuse(http.StatusBadRequest, err.Error())
	}
	t, err := s.startTrial(r, base, []byte(draft), d, sess.Author)
	var (
		ve *policies.ValidationError
		re *trial.RunningError
		ce *policies.ConflictError
	)
	switch {
	case err == nil:
		s.recordTrialStart(r, t)
		http.Redirect(w, r, "/trial?started="+strconv.FormatInt(t.ID, 10), http.StatusSeeOther)
		return nil
	case errors.As(err, &ve):
		p.Problems, p.Listing = annotate([]byte(draft), ve.Errors)
		return refuse(http.StatusUnprocessableEntity, "the draft is invalid; nothing was pushed.")
	case errors.As(err, &re):
		return refuse(http.StatusConflict, re.Error()+".")
	case errors.As(err, &ce):
		return refuse(http.StatusConflict, ce.Error()+": your draft was written on an older version. Reload the policy page and edit the current one.")
	case refused(err) != 0:
		return refuse(refused(err), err.Error())
	}
	return err
}

func (s *server) trialEndSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	t, err := s.endTrial(r)
	if err != nil {
		return s.trialPageWith(w, r, sess, http.StatusConflict, web.Flash{Kind: "error", Text: err.Error()})
	}
	http.Redirect(w, r, "/trial?ended="+strconv.FormatInt(t.ID, 10), http.StatusSeeOther)
	return nil
}

func (s *server) trialPromoteSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	v, _, err := s.promoteTrial(r, sess.Author, r.PostForm.Get("message"))
	var ce *policies.ConflictError
	switch {
	case err == nil:
		http.Redirect(w, r, "/?saved="+strconv.FormatInt(v.Number, 10), http.StatusSeeOther)
		return nil
	case errors.As(err, &ce):
		return s.trialPageWith(w, r, sess, http.StatusConflict, web.Flash{Kind: "error", Text: "Not promoted: " + ce.Error() +
			". The draft was written against an older version: end the trial, edit the current policy and try again."})
	case errors.As(err, new(*policies.ValidationError)):
		return s.trialPageWith(w, r, sess, http.StatusUnprocessableEntity, web.Flash{Kind: "error", Text: "Not promoted: " + err.Error()})
	case refused(err) != 0:
		return s.trialPageWith(w, r, sess, refused(err), web.Flash{Kind: "error", Text: "Not promoted: " + err.Error()})
	case errors.As(err, new(*policies.ProposedError)):
		return err // the change to review (pageError shows it)
	}
	return s.trialPageWith(w, r, sess, http.StatusConflict, web.Flash{Kind: "error", Text: "Not promoted: " + err.Error()})
}

func (s *server) trialPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	var flashes []web.Flash
	q := r.URL.Query()
	if n := q.Get("started"); n != "" {
		flashes = append(flashes, web.Flash{Kind: "ok", Text: "Trial " + n + " started: its rules are being pushed in shadow mode. Rates appear as the nodes report."})
	}
	if n := q.Get("ended"); n != "" {
		flashes = append(flashes, web.Flash{Kind: "ok", Text: "Trial " + n + " ended: the current version is being pushed again."})
	}
	return s.trialPageWith(w, r, sess, http.StatusOK, flashes...)
}

func (s *server) trialPageWith(w http.ResponseWriter, r *http.Request, sess auth.Session, status int, flashes ...web.Flash) error {
	p := web.TrialPage{Nav: nav(sess, "trial"), Flashes: flashes, Available: s.Trials != nil}
	if s.Trials != nil {
		if t, ok := s.Trials.Running(); ok {
			p.Trial = trialView(t, s.compareTrial(t), s.now())
			if f, ok := s.draftTestsWarning(r, t.Draft); ok {
				p.Flashes = append(p.Flashes, f)
			}
		}
	}
	s.render(w, r, status, web.Trial(p))
	return nil
}

func trialView(t trial.Trial, cmp trialComparison, now time.Time) *web.TrialView {
	v := &web.TrialView{
		ID: t.ID, Author: t.Author, Base: t.Base, Over: t.Over, Started: timeText(t.Started), Ends: timeText(t.Ends),
		EndsISO: t.Ends.UTC().Format(time.RFC3339), Left: t.Ends.Sub(now).Round(time.Second).String(), Telemetry: cmp.Telemetry,
	}
	rt := func(r *telemetry.Rates, d telemetry.Decision) string {
		if r == nil {
			return "—"
		}
		return rate(r[d])
	}
	for _, c := range cmp.Rules {
		v.Rules = append(v.Rules, web.TrialRuleView{
			Rule: c.Rule, Trial: c.TrialRule,
			CurAllowed: rt(c.Current, telemetry.Allowed), CurRejected: rt(c.Current, telemetry.Rejected),
			CurShadow:      rt(c.Current, telemetry.ShadowRejected),
			DraftAllowed:   rt(c.Draft, telemetry.Allowed),
			DraftRejecting: rt(c.Draft, telemetry.ShadowRejected),
		})
	}
	for _, id := range cmp.Identities {
		v.Identities = append(v.Identities, web.TrialIdentity{Rule: id.Rule, Identity: id.Identity, Rejects: id.RecentRejects, Nodes: id.Nodes})
	}
	return v
}
