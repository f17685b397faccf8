package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/migrate"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/policyedit"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/web"
)

// Converting another rate limiter's configuration (admin/migrate): the
// API answers the policy, the page previews it and saves it as a new
// version. Neither stores anything without a save.

// migrateInput is what a conversion reads, from the API's body or the
// page's form.
type migrateInput struct {
	From         string `json:"from"`
	Config       string `json:"config"`
	RateLimits   string `json:"rate_limits"`
	Scope        string `json:"scope"`
	FleetCluster string `json:"fleet_cluster"`
	Status       int    `json:"status"`
	// The choices of one source each (Input).
	AnnotationsPrefix string `json:"annotations_prefix"`
	ConsumerKey       string `json:"consumer_key"`
	Plugin            string `json:"plugin"`
	DefaultCost       int    `json:"default_cost"`
	// AddToCurrent adds the converted policies to the current version
	// (renamed where a name is taken) instead of answering them alone.
	AddToCurrent bool `json:"add_to_current"`
}

// migration is a conversion's outcome: the policy a save would store.
type migration struct {
	policy    []byte // the document to save
	converted []byte // the converted policies alone
	notes     []string
}

// convert runs the conversion for in, on the current version cur.
// Problems with the input are *policies.InputError naming its field.
func convert(in migrateInput, cur policies.Version) (migration, error) {
	mi := migrate.Input{From: in.From, Config: []byte(in.Config), RateLimits: []byte(in.RateLimits),
		Scope: in.Scope, FleetCluster: in.FleetCluster, Status: in.Status, AnnotationsPrefix: in.AnnotationsPrefix,
		ConsumerKey: in.ConsumerKey, Plugin: in.Plugin, DefaultCost: in.DefaultCost}
	if in.AddToCurrent {
		mi.Taken = migrate.Names(cur.JSON)
	}
	res, err := migrate.Convert(mi)
	var ie *migrate.InputError
	if errors.As(err, &ie) {
		return migration{}, &policies.InputError{Field: ie.Input, Message: strings.TrimPrefix(err.Error(), ie.Input+": ")}
	}
	if err != nil {
		return migration{}, err
	}
	m := migration{policy: res.Policy, converted: res.Policy, notes: res.Notes}
	if in.AddToCurrent {
		var notes []string
		if m.policy, notes, err = migrate.AddTo(cur.JSON, res.Policy); err != nil {
			return migration{}, err
		}
		m.notes = append(m.notes, notes...)
	}
	return m, nil
}

// apiMigrate is POST /api/v1/policy/migrate: the policy converted from
// another rate limiter's configuration, with notes on what differs. It saves
// nothing: POST /api/v1/policy saves the answer (with base_version when
// add_to_current was set).
func (s *server) apiMigrate(w http.ResponseWriter, r *http.Request) error {
	var in migrateInput
	if err := s.decodeJSON(w, r, &in, []string{"from", "config", "rate_limits", "scope", "fleet_cluster", "status", "annotations_prefix", "consumer_key", "plugin", "default_cost", "add_to_current"}); err != nil {
		return err
	}
	cur, err := s.Policies.Current(r.Context()) // secrets masked: a save restores them
	if err != nil {
		return err
	}
	m, err := convert(in, cur)
	if err != nil {
		return err
	}
	answer := map[string]any{"policy": json.RawMessage(m.policy), "notes": append([]string{}, m.notes...)} // [] rather than null
	if in.AddToCurrent {
		answer["base_version"] = cur.Number
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// migratePage is GET /policy/migrate: the empty form.
func (s *server) migratePage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	p := web.MigratePage{Nav: nav(sess, "policy"), Form: migrateForm(sess, cur)}
	p.Form.From = r.URL.Query().Get("from")
	if !p.Form.CanEdit {
		p.Flashes = []web.Flash{{Kind: "warn", Text: "Converting saves nothing; saving the result as a new version needs the editor role."}}
	}
	s.render(w, r, http.StatusOK, web.Migrate(p))
	return nil
}

// migrateSubmit is POST /policy/migrate: convert (op=preview), or save the
// conversion as a new version (op=save) based on base_version.
func (s *server) migrateSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	f := r.PostForm
	p := web.MigratePage{Nav: nav(sess, "policy"), Form: migrateForm(sess, cur)}
	p.Form.From, p.Form.Config, p.Form.RateLimits = f.Get("from"), crlf(f.Get("config")), crlf(f.Get("rate_limits"))
	p.Form.Scope, p.Form.Status = f.Get("scope"), strings.TrimSpace(f.Get("status"))
	p.Form.FleetCluster, p.Form.AnnotationsPrefix = strings.TrimSpace(f.Get("fleet_cluster")), strings.TrimSpace(f.Get("annotations_prefix"))
	p.Form.ConsumerKey, p.Form.Plugin = strings.TrimSpace(f.Get("consumer_key")), f.Get("plugin")
	p.Form.DefaultCost = strings.TrimSpace(f.Get("default_cost"))
	p.Form.Replace, p.Form.Message = f.Get("replace") != "", f.Get("message")
	fail := func(status int, text string) error {
		p.Flashes = []web.Flash{{Kind: "error", Text: text}}
		s.render(w, r, status, web.Migrate(p))
		return nil
	}
	base, err := parseVersion(f.Get("base_version"), "base_version")
	if err != nil {
		return fail(http.StatusBadRequest, "Not converted: "+err.Error())
	}
	in, err := formInput(p.Form)
	if err != nil {
		return fail(http.StatusBadRequest, "Not converted: "+err.Error())
	}
	m, err := convert(in, cur)
	var ie *policies.InputError
	if errors.As(err, &ie) {
		return fail(http.StatusBadRequest, "Not converted: "+ie.Error())
	}
	if err != nil {
		return err
	}
	p.Result = migrateView(m)
	if f.Get("op") != "save" {
		s.render(w, r, http.StatusOK, web.Migrate(p))
		return nil
	}
	if !canEdit(sess) {
		return fail(http.StatusForbidden, "Not saved: "+forbiddenMessage(sess.Principal(), auth.RoleEditor))
	}
	if base != cur.Number {
		p.Conflict = fmt.Sprintf("The conversion was based on v%d; v%d is current now (by %s).", base, cur.Number, cur.Author)
		s.render(w, r, http.StatusConflict, web.Migrate(p))
		return nil
	}
	msg := p.Form.Message
	if msg == "" {
		msg = fmt.Sprintf("Converted %d rules from %s", len(p.Result.Rules), sourceTitle(in.From))
	}
	v, err := s.Policies.Save(r.Context(), policies.SaveRequest{Base: base, JSON: m.policy, Author: sess.Author, Message: msg, Scope: scopeOf(principal(r))})
	var ce *policies.ConflictError
	var ve *policies.ValidationError
	switch {
	case err == nil:
		s.record(r, store.AuditEntry{Action: ActionSave, Version: v.Number, FromVersion: base, Detail: msg})
		http.Redirect(w, r, "/?saved="+strconv.FormatInt(v.Number, 10), http.StatusSeeOther)
		return nil
	case errors.As(err, &ce):
		p.Conflict = ce.Error()
		s.render(w, r, http.StatusConflict, web.Migrate(p))
		return nil
	case errors.As(err, &ve), errors.As(err, &ie), errors.As(err, new(*policies.TestsFailedError)):
		return fail(http.StatusUnprocessableEntity, "Not saved: "+err.Error())
	case refused(err) != 0:
		return fail(refused(err), "Not saved: "+err.Error())
	}
	return err
}

// migrateForm is the empty form on the current version cur.
func migrateForm(sess auth.Session, cur policies.Version) web.MigrateForm {
	f := web.MigrateForm{CSRF: sess.CSRF, BaseVersion: cur.Number, CanEdit: canEdit(sess)}
	for _, src := range migrate.Sources {
		f.Sources = append(f.Sources, web.MigrateSource{Name: src.Name, Title: src.Title, Config: src.Config, Reads: src.Reads})
	}
	return f
}

// formInput is the conversion the form asks for. The form shows every
// source's choices, so it sends each of them: those the chosen source
// does not read are left out, where the API refuses them.
func formInput(f web.MigrateForm) (migrateInput, error) {
	in := migrateInput{From: f.From, Config: f.Config, AddToCurrent: !f.Replace}
	src, ok := migrate.SourceNamed(f.From)
	if !ok {
		return in, nil // convert names the source at fault
	}
	if slices.Contains(src.Reads, "rate_limits") {
		in.RateLimits = f.RateLimits
	}
	if slices.Contains(src.Reads, "scope") {
		in.Scope = f.Scope
	}
	reads := func(field, v string) string {
		if slices.Contains(src.Reads, field) {
			return v
		}
		return ""
	}
	in.FleetCluster, in.AnnotationsPrefix = reads("fleet_cluster", f.FleetCluster), reads("annotations_prefix", f.AnnotationsPrefix)
	in.ConsumerKey, in.Plugin = reads("consumer_key", f.ConsumerKey), reads("plugin", f.Plugin)
	var err error
	if in.Status, err = formInt("status", reads("status", f.Status), "the rejection status, e.g. 503"); err != nil {
		return in, err
	}
	in.DefaultCost, err = formInt("default_cost", reads("default_cost", f.DefaultCost), "a number of tokens, e.g. 100")
	return in, err
}

// formInt reads a form's number ("" is 0: the default).
func formInt(field, v, want string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a whole number; give %s", field, v, want)
	}
	return n, nil
}

// sourceTitle is the name users know a source by.
func sourceTitle(name string) string {
	if src, ok := migrate.SourceNamed(name); ok {
		return src.Title
	}
	return name
}

// crlf turns a text area's CRLF line ends into LF.
func crlf(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }

// migrateView summarizes the converted rules (not the current ones the
// saved policy also holds).
func migrateView(m migration) *web.MigrateResult {
	v := &web.MigrateResult{Policy: policyedit.Pretty(m.policy), Notes: m.notes}
	doc, err := policyedit.ParseDoc(m.converted)
	if err != nil {
		return v
	}
	for p := range doc.Policies() {
		rules, _ := doc.Rules(p)
		for _, raw := range rules {
			o, err := policyedit.ParseObject(raw)
			if err != nil {
				continue
			}
			sum := policyedit.Summarize(o, "")
			text := sum.Matches + ": " + sum.Limit
			if sum.Keys != "" {
				text += ", " + sum.Keys
			}
			var ovs []json.RawMessage
			if raw, ok := o.Get("overrides"); ok && json.Unmarshal(raw, &ovs) == nil && len(ovs) > 0 {
				text += "; " + pluralCount(len(ovs), "override")
			}
			v.Rules = append(v.Rules, web.MigratedRule{Policy: doc.PolicyName(p), Name: sum.Name, Summary: text})
		}
	}
	return v
}
