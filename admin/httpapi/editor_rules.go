package httpapi

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/policyedit"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/web"
)

// The structured editor (docs/admin.md "Structured editor"): the draft's
// rules listed in words, with buttons that edit the draft (POST
// /policy/rules) and a rule form. Nothing is saved until Save, which goes
// through the usual save (base version, 409 when stale).

// rulesView lists the draft's rules; editing, when set, opens the rule form.
// Policies outside scope are listed read-only.
func rulesView(draft string, editing *web.RuleFormView, scope policies.Scope) web.RulesView {
	v := web.RulesView{Editing: editing}
	d, err := policyedit.ParseDoc([]byte(draft))
	if err != nil {
		v.Error = err.Error()
		return v
	}
	root, _ := policyedit.ParseObject([]byte(draft))
	mode := root.String("mode")
	for p := 0; p < d.Policies(); p++ {
		rp := web.RulesPolicy{Index: p, Name: d.PolicyName(p)}
		rp.ReadOnly = !scope.Allows(rp.Name)
		rs, err := d.Rules(p)
		if err != nil {
			v.Error = err.Error()
			continue
		}
		for i := range rs {
			o, err := d.Rule(policyedit.Ref{Policy: p, Rule: i})
			if err != nil {
				v.Error = err.Error()
				continue
			}
			s := policyedit.Summarize(o, mode)
			row := web.RuleRow{
				Ref: strconv.Itoa(p) + ":" + strconv.Itoa(i), Name: s.Name, Matches: s.Matches, Keys: s.Keys,
				Limit: s.Limit, Algorithm: s.Algorithm, Mode: s.Mode, Extra: s.Extra, First: i == 0, Last: i == len(rs)-1,
			}
			now := time.Now()
			row.Overrides, row.Timed, row.Weekly, row.Next = overridesOf(o, now)
			row.Time, row.TimeState = ruleTimeOf(o, now)
			rp.Rules = append(rp.Rules, row)
		}
		v.Policies = append(v.Policies, rp)
	}
	return v
}

// overridesOf reads a rule's "overrides" once: how many there are (0
// when none or not a list), how many hold for a time and how many weekly,
// and when the next of their bounds after now comes ("" when none will).
func overridesOf(o policyedit.Object, now time.Time) (count, timed, weekly int, next string) {
	raw, ok := o.Get("overrides")
	if !ok {
		return 0, 0, 0, ""
	}
	// A type error (an entry that is not an object, a bound that is not
	// a string) leaves the rest decoded: every entry still counts.
	var list []struct {
		From, Until string
		Schedule    json.RawMessage
	}
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, &list); err != nil && !errors.As(err, &typeErr) {
		return 0, 0, 0, ""
	}
	var soonest time.Time
	for _, ov := range list {
		if len(ov.Schedule) > 0 {
			weekly++
		}
		if ov.From == "" && ov.Until == "" {
			continue
		}
		timed++
		for _, b := range []string{ov.From, ov.Until} {
			if t, err := time.Parse(time.RFC3339Nano, b); err == nil && t.After(now) && (soonest.IsZero() || t.Before(soonest)) {
				soonest = t
			}
		}
	}
	return len(list), timed, weekly, timeText(soonest)
}

// ruleTimeOf puts a rule's "from", "until" and "schedule" in words and
// says whether now is before its bounds ("later"), within ("now") or
// after ("ended"), or, with a schedule and no bounds, "weekly"; "" for a
// rule that always applies. A bound the parser would refuse is shown as
// written and decides nothing: the save reports it.
func ruleTimeOf(o policyedit.Object, now time.Time) (text, state string) {
	text, state = boundsText(o.String("from"), o.String("until"), now)
	switch weekly := scheduleText(o); {
	case weekly == "":
	case text == "":
		text, state = weekly, "weekly"
	default:
		text += ", " + weekly
	}
	return text, state
}

// boundsText puts a rule's from and until in words with the state of now
// against them; "" for neither.
func boundsText(from, until string, now time.Time) (text, state string) {
	if from == "" && until == "" {
		return "", ""
	}
	bound := func(s string) (string, time.Time) {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return s, time.Time{}
		}
		return timeText(t), t
	}
	state = "now"
	if from != "" {
		words, t := bound(from)
		text = "from " + words
		if now.Before(t) {
			state = "later"
		}
	}
	if until != "" {
		words, t := bound(until)
		text = strings.TrimSpace(text + " until " + words)
		if !t.IsZero() && !now.Before(t) {
			state = "ended"
		}
	}
	return text, state
}

// scheduleText puts a rule's "schedule" in words as written ("weekly:
// mon, tue 09:00-18:00 Europe/Berlin"), "" for none.
func scheduleText(o policyedit.Object) string {
	raw, ok := o.Get("schedule")
	if !ok {
		return ""
	}
	var s struct {
		Days     []string `json:"days"`
		From     string   `json:"from"`
		Until    string   `json:"until"`
		TimeZone string   `json:"time_zone"`
	}
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, &s); err != nil && !errors.As(err, &typeErr) {
		return "weekly (see the JSON)"
	}
	days := strings.Join(s.Days, ", ")
	if days == "" {
		days = "every day"
	}
	return "weekly: " + days + " " + cmp.Or(s.From, "00:00") + "-" + cmp.Or(s.Until, "24:00") + " " + cmp.Or(s.TimeZone, "UTC")
}

// formView fills the rule form from a form model.
func formView(d *policyedit.Doc, ref policyedit.Ref, f policyedit.Form, errs []policyedit.FieldError) *web.RuleFormView {
	v := &web.RuleFormView{
		Ref: strconv.Itoa(ref.Policy) + ":" + strconv.Itoa(ref.Rule), Path: d.RulePath(ref),
		Name: f.Name, Mode: f.Mode, Scope: f.Scope, Action: f.Action, DenyStatus: f.DenyStatus, RejectStatus: f.RejectStatus, EnforcePercent: f.EnforcePercent,
		OwnLimit: f.OwnLimit, OwnRemaining: f.OwnRemaining, OwnReset: f.OwnReset,
		Algorithm: f.Algorithm, Rate: f.Rate, Burst: f.Burst, Block: f.Block,
		Limit: f.Limit, Window: f.Window, Period: f.Period, Kept: f.Kept, Errors: map[string]string{},
		Reject: f.Reject, RejectBody: f.RejectBody, RejectContentType: f.RejectContentType,
		OwnHeaders: f.OwnHeaders, RejectHeaders: f.RejectHeaders,
		From: f.From, Until: f.Until,
		Days: f.Schedule.Days, WeeklyFrom: f.Schedule.From, WeeklyUntil: f.Schedule.Until, WeeklyZone: f.Schedule.TimeZone,
	}
	for _, k := range f.Keys {
		kind, name, _ := strings.Cut(k, ":")
		switch {
		case k == "ip:address" || k == "peer:principal": // a kind with its one argument
			kind, name = k, ""
		case strings.HasPrefix(k, "ip:network"): // its prefix lengths, if not the default
			kind, name = "ip:network", strings.TrimPrefix(strings.TrimPrefix(k, "ip:network"), ":")
		}
		v.Keys = append(v.Keys, web.LimitKeyRow{Kind: kind, Name: name})
	}
	for len(v.Keys) < 3 {
		v.Keys = append(v.Keys, web.LimitKeyRow{})
	}
	for _, m := range f.Match {
		v.Match = append(v.Match, web.MatchCondRow{Source: m.Source, Value: m.Value})
	}
	for len(v.Match) < len(f.Match)+2 {
		v.Match = append(v.Match, web.MatchCondRow{})
	}
	for _, e := range errs {
		if prev, ok := v.Errors[e.Field]; ok {
			v.Errors[e.Field] = prev + "; " + e.Message
		} else {
			v.Errors[e.Field] = e.Message
		}
	}
	return v
}

// formFromPost reads the rule form's fields.
func formFromPost(f url.Values) policyedit.Form {
	out := policyedit.Form{
		Name: f.Get("rf_name"), Mode: f.Get("rf_mode"), Scope: f.Get("rf_scope"), Action: f.Get("rf_action"), DenyStatus: f.Get("rf_deny_status"),
		RejectStatus: f.Get("rf_reject_status"),
		OwnLimit:     f.Get("rf_own_limit"), OwnRemaining: f.Get("rf_own_remaining"), OwnReset: f.Get("rf_own_reset"),
		EnforcePercent: f.Get("rf_enforce_percent"),
		Algorithm:      f.Get("rf_algorithm"),
		Rate:           f.Get("rf_rate"), Burst: f.Get("rf_burst"), Block: f.Get("rf_block"), Limit: f.Get("rf_limit"), Window: f.Get("rf_window"), Period: f.Get("rf_period"),
		// A browser sends a textarea's lines ended with CRLF.
		RejectBody:        strings.ReplaceAll(f.Get("rf_reject_body"), "\r\n", "\n"),
		RejectContentType: f.Get("rf_reject_content_type"),
		RejectHeaders:     strings.ReplaceAll(f.Get("rf_reject_headers"), "\r\n", "\n"),
		From:              f.Get("rf_from"), Until: f.Get("rf_until"),
		Schedule: policyedit.ScheduleFields{Days: f["rf_day"], From: f.Get("rf_weekly_from"), Until: f.Get("rf_weekly_until"),
			TimeZone: f.Get("rf_weekly_zone")},
	}
	// A body typed in is the rule's own even if its box was left unticked;
	// the box alone stands for an empty body.
	out.Reject = f.Get("rf_reject") != "" || out.RejectBody != ""
	out.OwnHeaders = f.Get("rf_own_headers") != "" || strings.TrimSpace(out.RejectHeaders) != ""
	for i := 0; i < 16; i++ {
		kind := f.Get("rf_key_kind" + strconv.Itoa(i))
		name := strings.TrimSpace(f.Get("rf_key_name" + strconv.Itoa(i)))
		switch {
		case kind == "":
		case kind == "header" || kind == "query" || kind == "jwt" || kind == "cookie" || kind == "metadata":
			out.Keys = append(out.Keys, kind+":"+name)
		case kind == "ip:network" && name != "": // its prefix lengths, "16:48"
			out.Keys = append(out.Keys, kind+":"+name)
		default:
			out.Keys = append(out.Keys, kind)
		}
		src, val := f.Get("rf_match_src"+strconv.Itoa(i)), f.Get("rf_match_val"+strconv.Itoa(i))
		if src != "" || val != "" {
			out.Match = append(out.Match, policyedit.MatchRow{Source: src, Value: val})
		}
	}
	return out
}

func parseRef(s string) (policyedit.Ref, error) {
	ps, rs, ok := strings.Cut(s, ":")
	p, err1 := strconv.Atoi(ps)
	r, err2 := strconv.Atoi(rs)
	if !ok || err1 != nil || err2 != nil || p < 0 || r < 0 {
		return policyedit.Ref{}, fmt.Errorf("%q is not a rule reference", s)
	}
	return policyedit.Ref{Policy: p, Rule: r}, nil
}

// rulesSubmit is POST /policy/rules: one action of the structured editor
// on the submitted draft; the page comes back with the new draft, unsaved.
func (s *server) rulesSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	f := r.PostForm
	draft := strings.ReplaceAll(f.Get("policy"), "\r\n", "\n")
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	p := web.EditorPage{
		Nav: nav(sess, "policy"), Current: versionInfo(cur, cur.Number), BaseVersion: cur.Number,
		Message:    f.Get("message"),
		Sim:        simFormOf(f),
		Review:     s.Policies.ReviewRequired(),
		ReviewOnly: s.Policies.ReviewPolicies().String(),
		Follows:    s.follows(),
	}
	if base, err := parseVersion(f.Get("base_version"), "base_version"); err == nil {
		p.BaseVersion = base
	}
	status, editing, flash, err := applyRuleOp(&draft, f)
	p.Draft, p.Rows = draft, rows(draft)
	p.Rules = rulesView(draft, editing, scopeOf(sess.Principal()))
	if editing != nil {
		p.DefaultOp = "apply:" + editing.Ref
	}
	switch {
	case err != nil:
		p.Flashes = append(p.Flashes, web.Flash{Kind: "error", Text: err.Error()})
	case flash != "":
		p.Flashes = append(p.Flashes, web.Flash{Kind: "ok", Text: flash + " Not saved yet: Save stores the draft and pushes it."})
		for _, w := range policies.Warnings([]byte(draft)) { // what the change made unreachable, say
			p.Flashes = append(p.Flashes, web.Flash{Kind: "warn", Text: "The draft's " + w.String()})
		}
	}
	s.render(w, r, status, web.Editor(p))
	return nil
}

// applyRuleOp runs the action named by the form's "op" on *draft.
func applyRuleOp(draft *string, f url.Values) (status int, editing *web.RuleFormView, flash string, err error) {
	op, arg, _ := strings.Cut(f.Get("op"), ":")
	if op == "cancel" {
		return http.StatusOK, nil, "", nil
	}
	d, err := policyedit.ParseDoc([]byte(*draft))
	if err != nil {
		return http.StatusBadRequest, nil, "", fmt.Errorf("the draft is not a policy the structured view can edit (%v); use the JSON view", err)
	}
	if op == "add" {
		pi, perr := strconv.Atoi(arg)
		if perr != nil {
			return http.StatusBadRequest, nil, "", errors.New("no such policy")
		}
		ref, err := d.NewRule(pi)
		if err != nil {
			return http.StatusBadRequest, nil, "", err
		}
		*draft = string(d.JSON())
		o, _ := d.Rule(ref)
		return http.StatusOK, formView(d, ref, policyedit.FormOf(o), nil), "", nil
	}
	ref, err := parseRef(arg)
	if err != nil {
		return http.StatusBadRequest, nil, "", err
	}
	o, err := d.Rule(ref)
	if err != nil {
		return http.StatusBadRequest, nil, "", err
	}
	name := strconv.Quote(o.String("name"))
	switch op {
	case "edit":
		return http.StatusOK, formView(d, ref, policyedit.FormOf(o), nil), "", nil
	case "up", "down":
		delta := -1
		if op == "down" {
			delta = 1
		}
		if err := d.Move(ref, delta); err != nil {
			return http.StatusBadRequest, nil, "", err
		}
		flash = "Moved rule " + name + " " + op + "."
	case "duplicate":
		if _, err := d.Duplicate(ref); err != nil {
			return http.StatusBadRequest, nil, "", err
		}
		flash = "Duplicated rule " + name + "."
	case "delete":
		if err := d.Delete(ref); err != nil {
			return http.StatusBadRequest, nil, "", err
		}
		flash = "Deleted rule " + name + "."
	case "apply":
		form := formFromPost(f)
		n, errs := form.Apply(o)
		if len(errs) == 0 {
			if err := d.SetRule(ref, n); err != nil {
				return http.StatusBadRequest, nil, "", err
			}
			// The filter's own parser judges the rule; its errors go next
			// to their fields.
			if _, perr := policy.Parse(d.JSON()); perr != nil {
				var pes policy.Errors
				if errors.As(perr, &pes) {
					for _, pe := range pes {
						if fe, ok := policyedit.Locate(pe, d.RulePath(ref)); ok {
							errs = append(errs, fe)
						}
					}
				}
			}
		}
		if len(errs) > 0 {
			return http.StatusUnprocessableEntity, formView(d, ref, form, errs), "", nil // the draft stays as it was
		}
		flash = "Updated rule " + strconv.Quote(n.String("name")) + "."
	default:
		return http.StatusBadRequest, nil, "", fmt.Errorf("unknown action %q", op)
	}
	*draft = string(d.JSON())
	return http.StatusOK, nil, flash, nil
}
