package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/web"
)

// The CSV import of overrides as a form (docs/admin.md "Importing
// overrides from CSV"): GET /policy/overrides shows it, POST previews
// (op=preview) or saves a new version (op=save) based on base_version,
// like the policy page's Save. The API's equivalent is POST
// /api/v1/policy/overrides followed by POST /api/v1/policy.

// importForm is the import form for sess over the current version cur.
func importForm(sess auth.Session, cur policies.Version) *web.OverridesForm {
	f := &web.OverridesForm{CSRF: sess.CSRF, BaseVersion: cur.Number}
	cfg, err := policy.Parse(cur.JSON)
	if err != nil {
		return f // an old version the filter refuses today: no rules to offer
	}
	for _, p := range cfg.Policies {
		for i := range p.Rules {
			r := &p.Rules[i]
			if r.Action != policy.ActionLimit {
				continue
			}
			f.Rules = append(f.Rules, web.RuleChoice{
				Name: r.Name, Policy: p.Name, Algorithm: r.Algorithm,
				Columns: strings.Join(slices.Concat(policy.OverrideFields(r.Algorithm), policies.TimeColumns), ","), Overrides: len(r.Overrides),
			})
		}
	}
	return f
}

// canEdit reports whether the session may save (the import form is shown
// only then; a viewer's POST is refused by requiredRole anyway).
func canEdit(sess auth.Session) bool { return sess.Principal().Role.Allows(auth.RoleEditor) }

// overridesPage is GET /policy/overrides: the empty import form (the rule
// preselected by ?rule=).
func (s *server) overridesPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	p := web.OverridesPage{Nav: nav(sess, "policy"), Form: *importForm(sess, cur)}
	p.Form.Rule = r.URL.Query().Get("rule")
	if !canEdit(sess) {
		p.Form.Rules = nil
		p.Flashes = []web.Flash{{Kind: "warn", Text: "Importing overrides saves a new version: it needs the editor role."}}
	}
	s.render(w, r, http.StatusOK, web.Overrides(p))
	return nil
}

// overridesSubmit is POST /policy/overrides: preview the CSV's import into
// the rule, or save it as a new version.
func (s *server) overridesSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	f := r.PostForm
	p := web.OverridesPage{Nav: nav(sess, "policy"), Form: *importForm(sess, cur)}
	p.Form.Rule, p.Form.Replace, p.Form.Message = f.Get("rule"), f.Get("replace") != "", f.Get("message")
	csvText, err := importedCSV(r)
	if err != nil {
		return err
	}
	p.Form.CSV = csvText
	base, err := parseVersion(f.Get("base_version"), "base_version")
	if err != nil {
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + err.Error()}}
		s.render(w, r, http.StatusBadRequest, web.Overrides(p))
		return nil
	}
	if p.Form.Rule == "" || csvText == "" {
		p.Flashes = []web.Flash{{Kind: "error", Text: "Choose a rule and give the CSV (a file or pasted text)."}}
		s.render(w, r, http.StatusBadRequest, web.Overrides(p))
		return nil
	}
	save := f.Get("op") == "save"
	if save && base != cur.Number {
		p.Conflict = fmt.Sprintf("The preview was based on v%d; v%d is current now (by %s).", base, cur.Number, cur.Author)
		s.render(w, r, http.StatusConflict, web.Overrides(p))
		return nil
	}
	pv, err := policies.PreviewOverridesCSV(cur.JSON, p.Form.Rule, []byte(csvText), p.Form.Replace)
	var ie *policies.InputError
	if errors.As(err, &ie) {
		p.Flashes = []web.Flash{{Kind: "error", Text: ie.Error()}}
		s.render(w, r, http.StatusBadRequest, web.Overrides(p))
		return nil
	}
	if err != nil {
		return err
	}
	p.Preview = previewView(pv)
	if !p.Preview.OK || !save {
		status := http.StatusOK
		if !p.Preview.OK {
			status = http.StatusUnprocessableEntity
		}
		s.render(w, r, status, web.Overrides(p))
		return nil
	}
	msg := p.Form.Message
	if msg == "" {
		msg = fmt.Sprintf("Imported %d overrides into rule %s from CSV (%d added, %d replaced)", pv.Count, pv.Rule, pv.Stats.Added, pv.Stats.Replaced)
	}
	v, err := s.Policies.Save(r.Context(), policies.SaveRequest{Base: base, JSON: pv.Policy, Author: sess.Author, Message: msg, Scope: scopeOf(principal(r))})
	var ce *policies.ConflictError
	var ve *policies.ValidationError
	switch {
	case err == nil:
		s.record(r, store.AuditEntry{Action: ActionSave, Version: v.Number, FromVersion: base, Detail: msg})
		http.Redirect(w, r, "/?saved="+strconv.FormatInt(v.Number, 10), http.StatusSeeOther)
	case errors.As(err, &ce):
		p.Conflict = ce.Error()
		s.render(w, r, http.StatusConflict, web.Overrides(p))
	case errors.As(err, &ve): // the preview validated it: only a size limit is left
		p.Preview.OK = false
		for _, e := range ve.Errors {
			p.Preview.Problems = append(p.Preview.Problems, web.CSVProblemView{Message: e.Error()})
		}
		s.render(w, r, http.StatusUnprocessableEntity, web.Overrides(p))
	case errors.As(err, &ie):
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + ie.Error()}}
		s.render(w, r, http.StatusBadRequest, web.Overrides(p))
	case refused(err) != 0:
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + err.Error()}}
		s.render(w, r, http.StatusForbidden, web.Overrides(p))
	case errors.As(err, new(*policies.TestsFailedError)):
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + err.Error() + ". See the Tests page."}}
		s.render(w, r, http.StatusUnprocessableEntity, web.Overrides(p))
	default:
		return err
	}
	return nil
}

// importedCSV is the form's CSV: the uploaded file when one was chosen,
// else the pasted text.
func importedCSV(r *http.Request) (string, error) {
	if r.MultipartForm != nil {
		if fhs := r.MultipartForm.File["csv_file"]; len(fhs) > 0 && fhs[0].Size > 0 {
			file, err := fhs[0].Open()
			if err != nil {
				return "", err
			}
			defer file.Close()
			b, err := io.ReadAll(file)
			if err != nil {
				return "", err
			}
			return strings.ReplaceAll(string(b), "\r\n", "\n"), nil
		}
	}
	return strings.ReplaceAll(r.PostForm.Get("csv"), "\r\n", "\n"), nil
}

func previewView(pv policies.OverridesPreview) *web.OverridesPreview {
	v := &web.OverridesPreview{
		Rule: pv.Rule, Count: pv.Count, Added: pv.Stats.Added, Replaced: pv.Stats.Replaced, Total: pv.Stats.Total,
		Columns: pv.Columns, OK: len(pv.Problems) == 0,
	}
	for _, r := range pv.Rows {
		v.Rows = append(v.Rows, web.CSVRowView{Line: r.Line, Key: r.Key, Cells: r.Cells})
	}
	for _, pr := range pv.Problems {
		v.Problems = append(v.Problems, web.CSVProblemView{Line: pr.Line, Column: pr.Column, Message: pr.Message})
	}
	return v
}
