package policyedit

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Summary is a rule in words, for the list.
type Summary struct {
	Name      string
	Matches   string // "header:x-plan is premium, path starts with /api" or "every request"
	Keys      string // "per header:x-api-key"
	Limit     string // "10/s, burst 20"
	Algorithm string
	Mode      string // "enforce", "shadow", or "enforce (policy default)"; ", not marked upstream" with "shadow_mark": false; ", on 25% of its identities" with "enforce_percent"
	Extra     string // members the form does not edit, by name
}

// formFields are the rule members the form edits; the others are kept.
var formFields = map[string]bool{"name": true, "mode": true, "action": true, "deny_status": true, "reject_status": true, "limit_headers": true,
	"limit_keys": true, "match": true, "algorithm": true, "algorithm_config": true, "enforce_percent": true,
	"from": true, "until": true, "schedule": true, "scope": true}

// limitsNothing reports whether action is one of a rule that limits nothing
// (exempt, unlimited, deny): it has no limit keys and no algorithm.
func limitsNothing(action string) bool { return policy.LimitsNothing(action) }

// Summarize describes a rule. defaultMode is the document's mode.
func Summarize(o Object, defaultMode string) Summary {
	s := Summary{Name: o.String("name"), Algorithm: o.String("algorithm")}
	s.Mode = o.String("mode")
	if s.Mode == "" {
		if defaultMode == "" {
			defaultMode = string(policy.ModeEnforce)
		}
		s.Mode = defaultMode + " (default)"
	}
	var mark, pct = true, 100.0
	if v, ok := o.Get("shadow_mark"); ok {
		json.Unmarshal(v, &mark)
	}
	if v, ok := o.Get("enforce_percent"); ok {
		json.Unmarshal(v, &pct)
	}
	switch {
	case strings.HasPrefix(s.Mode, string(policy.ModeShadow)):
		if !mark {
			s.Mode += ", not marked upstream"
		}
	case pct < 100:
		s.Mode += ", on " + strconv.FormatFloat(pct, 'f', -1, 64) + "% of its identities"
		if !mark {
			s.Mode += ", the others not marked upstream"
		}
	}
	var keys []string
	if v, ok := o.Get("limit_keys"); ok {
		json.Unmarshal(v, &keys)
	}
	s.Keys = "per " + strings.Join(keys, " + ")
	if len(keys) == 1 && keys[0] == "all" {
		s.Keys = "one bucket for all its requests"
	}
	if len(keys) == 0 {
		s.Keys = "no limit keys"
	}
	s.Matches = "every request"
	if v, ok := o.Get("match"); ok {
		if m, err := ParseObject(v); err == nil && len(m) > 0 {
			var parts []string
			for _, c := range m {
				parts = append(parts, describeMatch(c))
			}
			s.Matches = strings.Join(parts, ", ")
		}
	}
	cfg := Object{}
	if v, ok := o.Get("algorithm_config"); ok {
		cfg, _ = ParseObject(v)
	}
	switch action := o.String("action"); action {
	case policy.ActionExempt:
		s.Limit, s.Keys = "exempt: no rule limits it", ""
	case policy.ActionUnlimited:
		s.Limit, s.Keys = "unlimited: no later rule of its policy limits it", ""
	case policy.ActionDeny:
		status := numText(o, "deny_status")
		if status == "?" {
			status = strconv.Itoa(policy.DefaultDenyStatus)
		}
		s.Limit, s.Keys = "denied with "+status, ""
	default:
		s.Limit = describeLimit(s.Algorithm, cfg) + describeCost(cfg)
		if o.String("scope") == policy.ScopeGlobal {
			s.Limit += ", across the fleet"
		}
		if _, own := o.Get("reject_status"); own {
			s.Limit += ", rejected with " + numText(o, "reject_status")
		}
	}
	var extra []string
	for _, m := range o {
		if !formFields[m.Key] {
			extra = append(extra, m.Key)
		}
	}
	s.Extra = strings.Join(extra, ", ")
	return s
}

func describeMatch(c Member) string {
	var v string
	if c.Key == "path_prefix" && json.Unmarshal(c.Value, &v) == nil {
		return "path starts with " + v
	}
	if text, ok := describeCondition(c.Value, false); ok {
		return c.Key + " " + text
	}
	return c.Key + " " + string(c.Value) // an operator the editor has no words for
}

// describeCondition puts a condition (configuration.md, "Conditions") in
// words, negated under "not": "is premium", "starts with /api/", "is not
// one of a, b". ok is false for a shape it does not know.
func describeCondition(raw json.RawMessage, negate bool) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return pick(negate, "is not ", "is ") + s, true
	}
	o, err := ParseObject(raw)
	if err != nil || len(o) != 1 {
		return "", false
	}
	op, val := o[0].Key, o[0].Value
	var list []string
	var present bool
	switch {
	case op == "not":
		return describeCondition(val, !negate)
	case op == "present" && json.Unmarshal(val, &present) == nil:
		return pick(present != negate, "is present", "is absent"), true
	case (op == "in" || op == "cidr") && json.Unmarshal(val, &list) == nil:
		return pick(negate, "is not ", "is ") + pick(op == "in", "one of ", "in ") + strings.Join(list, ", "), true
	case json.Unmarshal(val, &s) != nil:
		return "", false
	}
	switch op {
	case "exact":
		return pick(negate, "is not ", "is ") + s, true
	case "prefix":
		return pick(negate, "does not start with ", "starts with ") + s, true
	case "suffix":
		return pick(negate, "does not end with ", "ends with ") + s, true
	case "regex":
		return pick(negate, "does not match ", "matches ") + s, true
	}
	return "", false
}

// pick is yes when cond holds, else no.
func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

func numText(cfg Object, keys ...string) string {
	for _, k := range keys {
		if v, ok := cfg.Get(k); ok {
			return strings.TrimSpace(string(v))
		}
	}
	return "?"
}

func describeLimit(alg string, cfg Object) string {
	switch alg {
	case policy.AlgorithmTokenBucket:
		s := numText(cfg, "tokens_per_second", "rps") + "/s, burst " + numText(cfg, "burst")
		if _, ok := cfg.Get("max_delay_ms"); ok {
			s += ", delays up to " + numText(cfg, "max_delay_ms") + " ms"
		}
		if _, ok := cfg.Get("block_seconds"); ok {
			s += ", a refused identity blocked " + numText(cfg, "block_seconds") + " s"
		}
		return s
	case policy.AlgorithmFixedWindow, policy.AlgorithmSlidingWindow:
		return numText(cfg, "limit") + " per " + numText(cfg, "window_seconds") + " s"
	case policy.AlgorithmRollingWindow:
		s := numText(cfg, "limit") + " per " + numText(cfg, "window_seconds") + " s in periods of " + numText(cfg, "period_seconds") + " s"
		if _, ok := cfg.Get("max_per_period"); ok {
			s += ", at most " + numText(cfg, "max_per_period") + " a period"
		}
		return s
	case policy.AlgorithmQuota:
		zone := "UTC"
		if z := cfg.String("time_zone"); z != "" {
			zone = z
		}
		return numText(cfg, "limit") + " per " + cfg.String("period") + " (" + zone + ")"
	case policy.AlgorithmConcurrency:
		return numText(cfg, "limit") + " in flight at once"
	}
	return "unknown algorithm"
}

// describeCost says where a rule's cost comes from when it is not fixed:
// ", counting responses 401,403".
func describeCost(cfg Object) string {
	src := cfg.String("cost_source")
	if src == "response_bytes" {
		return ", charged the response body's bytes"
	}
	for _, c := range []struct{ prefix, words string }{
		{"header:", "cost from request header "}, {"query:", "cost from query parameter "},
		{"metadata:", "cost from Envoy metadata "},
		{"response_header:", "charged from response header "}, {"response_trailer:", "charged from response trailer "},
		{"response_status:", "counting responses "}, {"response_grpc_status:", "counting gRPC responses "},
		{"response_json:", "charged from response body "},
	} {
		if rest, ok := strings.CutPrefix(src, c.prefix); ok {
			return ", " + c.words + rest
		}
	}
	return ""
}

// MatchRow is one editable match condition: a source ("header:x-plan",
// "path_prefix", "method", ...) and the value it must have.
type MatchRow struct {
	Source, Value string
}

// Form is the rule form's fields, as text.
type Form struct {
	Name string
	Mode string // "" (the document's), "enforce", "shadow"
	// Scope is where a limit rule counts: "" (each Envoy process, the
	// default) or "global" (across the fleet, through the rate limit
	// service; the configuration needs a "fleet" block).
	Scope      string
	Action     string // "" (limit), "limit", "exempt", "deny"
	DenyStatus string // a deny rule's deny_status, "" for the default
	// RejectStatus is a limit rule's own reject_status, "" for the
	// configuration's.
	RejectStatus string
	// OwnLimit, OwnRemaining and OwnReset are a limit rule's
	// "limit_headers": the names its own numbers are sent under, "" for
	// one not sent (limit_headers.go).
	OwnLimit, OwnRemaining, OwnReset string
	// EnforcePercent is a limit rule's enforce_percent, "" for every
	// identity.
	EnforcePercent string
	Algorithm      string
	Rate           string // token_bucket tokens_per_second
	Burst          string
	Block          string // token_bucket block_seconds, "" for none
	Limit          string // windows
	Window         string
	Period         string // rolling_window period_seconds
	Keys           []string
	Match          []MatchRow
	// Kept lists the match conditions the form cannot edit (operators it
	// has no fields for): they stay as they are.
	Kept []string
	// Reject is whether the rule has its own rejection body (reject_body,
	// which may be empty) with RejectBody and RejectContentType ("" for
	// the default of the body).
	Reject            bool
	RejectBody        string
	RejectContentType string
	// OwnHeaders is whether the rule has its own "reject_headers" (which
	// may be empty), RejectHeaders them as "name: value" lines
	// (reject_headers.go).
	OwnHeaders    bool
	RejectHeaders string
	// From and Until bound when the rule applies (RFC 3339), "" for no
	// bound.
	From, Until string
	// Schedule is the rule's weekly "schedule"; all empty for none.
	Schedule ScheduleFields
}

// ScheduleFields are a schedule's fields as text: the days ("mon".."sun")
// and from, until and the time zone, "" for their defaults.
type ScheduleFields struct {
	Days                  []string
	From, Until, TimeZone string
}

// empty reports whether the form sets no schedule.
func (s ScheduleFields) empty() bool {
	return len(s.Days) == 0 && strings.TrimSpace(s.From+s.Until+s.TimeZone) == ""
}

// FormOf fills the form from a rule.
func FormOf(o Object) Form {
	f := Form{Name: o.String("name"), Mode: o.String("mode"), Action: o.String("action"), Algorithm: o.String("algorithm"),
		From: o.String("from"), Until: o.String("until"), Scope: o.String("scope")}
	if v, ok := o.Get("schedule"); ok {
		sc, _ := ParseObject(v)
		f.Schedule = ScheduleFields{From: sc.String("from"), Until: sc.String("until"), TimeZone: sc.String("time_zone")}
		if d, ok := sc.Get("days"); ok {
			json.Unmarshal(d, &f.Schedule.Days)
		}
	}
	if v, ok := o.Get("deny_status"); ok {
		f.DenyStatus = strings.TrimSpace(string(v))
	}
	if v, ok := o.Get("enforce_percent"); ok {
		f.EnforcePercent = strings.TrimSpace(string(v))
	}
	if v, ok := o.Get("reject_status"); ok {
		f.RejectStatus = strings.TrimSpace(string(v))
	}
	if v, ok := o.Get("limit_headers"); ok {
		f.OwnLimit, f.OwnRemaining, f.OwnReset = limitHeadersOf(v) // limit_headers.go
	}
	if _, ok := o.Get("reject_body"); ok {
		f.Reject, f.RejectBody, f.RejectContentType = true, o.String("reject_body"), o.String("reject_content_type")
	}
	if v, ok := o.Get("reject_headers"); ok {
		f.OwnHeaders, f.RejectHeaders = true, headersText(v)
	}
	if v, ok := o.Get("limit_keys"); ok {
		json.Unmarshal(v, &f.Keys)
	}
	if v, ok := o.Get("match"); ok {
		m, _ := ParseObject(v)
		for _, c := range m {
			var s string
			if json.Unmarshal(c.Value, &s) == nil {
				f.Match = append(f.Match, MatchRow{Source: c.Key, Value: s})
			} else {
				f.Kept = append(f.Kept, describeMatch(c))
			}
		}
	}
	cfg := Object{}
	if v, ok := o.Get("algorithm_config"); ok {
		cfg, _ = ParseObject(v)
	}
	get := func(keys ...string) string {
		if s := numText(cfg, keys...); s != "?" {
			return s
		}
		return ""
	}
	f.Rate, f.Burst, f.Block = get("tokens_per_second", "rps"), get("burst"), get("block_seconds")
	f.Limit, f.Window, f.Period = get("limit"), get("window_seconds"), get("period_seconds")
	return f
}

// FieldError is a problem with one of the form's fields.
type FieldError struct {
	Field   string // "name", "mode", "scope", "action", "deny_status", "reject_status", "enforce_percent", "from", "until", "reject_body", "reject_content_type", "reject_headers", "limit_headers", "algorithm", "rate", "burst", "block", "limit", "window", "period", "keys", "match", "" (the rule)
	Message string
}

// Apply writes the form into the rule o, keeping every member and
// algorithm_config field the form does not edit. A number that is not one
// is reported against its field; everything else is left to the filter's
// parser (see Locate). An exempt, unlimited or deny rule limits nothing: it keeps no
// limit keys, algorithm or algorithm_config, whatever the form holds.
func (f Form) Apply(o Object) (Object, []FieldError) {
	out := append(Object(nil), o...)
	var errs []FieldError
	// num writes a number field into obj, or deletes it when empty.
	num := func(obj *Object, field, key, text string, aliases ...string) {
		text = strings.TrimSpace(text)
		if text == "" {
			obj.Delete(key)
			return
		}
		if _, err := strconv.ParseFloat(text, 64); err != nil || !json.Valid([]byte(text)) {
			errs = append(errs, FieldError{field, strconv.Quote(text) + " is not a number"})
			return
		}
		for _, a := range aliases {
			obj.Delete(a)
		}
		obj.Set(key, json.RawMessage(text))
	}
	out.Set("name", strings.TrimSpace(f.Name))
	switch f.Mode {
	case "":
		out.Delete("mode")
	default:
		out.Set("mode", f.Mode)
	}
	action := strings.TrimSpace(f.Action)
	if action == "" {
		out.Delete("action")
	} else {
		out.Set("action", action)
	}
	if action == policy.ActionDeny {
		num(&out, "deny_status", "deny_status", f.DenyStatus)
	} else {
		out.Delete("deny_status")
	}
	for _, b := range []struct{ key, text string }{{"from", f.From}, {"until", f.Until}} {
		if t := strings.TrimSpace(b.text); t != "" {
			out.Set(b.key, t) // the parser checks the time, naming the field
		} else {
			out.Delete(b.key)
		}
	}
	if f.Schedule.empty() {
		out.Delete("schedule")
	} else {
		out.Set("schedule", f.Schedule.object()) // the parser checks it, naming the field
	}
	if match := f.matchOf(o, &errs); len(match) > 0 {
		out.Set("match", match)
	} else {
		out.Delete("match")
	}
	f.applyReject(&out, action)
	f.applyRejectHeaders(&out, action, &errs) // reject_headers.go
	if limitsNothing(action) {
		out.Delete("scope")
		out.Delete("enforce_percent")
		out.Delete("reject_status")
		out.Delete("limit_headers") // a limit rule's numbers: kept as written on a limit rule
		out.Delete("limit_keys")
		out.Delete("algorithm")
		out.Delete("algorithm_config")
		return out, errs
	}
	var keys []string
	for _, k := range f.Keys {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	if keys == nil {
		keys = []string{}
	}
	out.Set("limit_keys", keys)
	if scope := strings.TrimSpace(f.Scope); scope == "" {
		out.Delete("scope")
	} else {
		out.Set("scope", scope) // the parser checks it, and that a fleet block exists
	}
	num(&out, "enforce_percent", "enforce_percent", f.EnforcePercent)
	num(&out, "reject_status", "reject_status", strings.TrimSpace(f.RejectStatus))
	f.applyLimitHeaders(&out, o) // limit_headers.go

	cfg := Object{}
	if v, ok := o.Get("algorithm_config"); ok && o.String("algorithm") == f.Algorithm {
		cfg, _ = ParseObject(v) // same algorithm: keep its other settings
	}
	out.Set("algorithm", f.Algorithm)
	switch f.Algorithm {
	case policy.AlgorithmTokenBucket:
		num(&cfg, "rate", "tokens_per_second", f.Rate, "rps")
		num(&cfg, "burst", "burst", f.Burst)
		num(&cfg, "block", "block_seconds", f.Block)
	case policy.AlgorithmFixedWindow, policy.AlgorithmSlidingWindow, policy.AlgorithmRollingWindow:
		num(&cfg, "limit", "limit", f.Limit)
		num(&cfg, "window", "window_seconds", f.Window)
		if f.Algorithm == policy.AlgorithmRollingWindow {
			num(&cfg, "period", "period_seconds", f.Period)
		}
	case policy.AlgorithmQuota:
		num(&cfg, "limit", "limit", f.Limit) // period and time zone are kept as written
	case policy.AlgorithmConcurrency:
		num(&cfg, "limit", "limit", f.Limit) // max_request_seconds is kept as written
	}
	out.Set("algorithm_config", cfg)
	return out, errs
}

// applyReject writes the rule's own rejection body and content type, or
// removes them (an exempt or unlimited rule rejects nothing).
func (f Form) applyReject(out *Object, action string) {
	if !f.Reject || policy.RejectsNothing(action) {
		out.Delete("reject_body")
		out.Delete("reject_content_type")
		return
	}
	out.Set("reject_body", f.RejectBody)
	if ct := strings.TrimSpace(f.RejectContentType); ct != "" {
		out.Set("reject_content_type", ct)
	} else {
		out.Delete("reject_content_type")
	}
}

// matchOf is the rule's match: the editable conditions from the form, then
// the ones the form cannot edit, kept from o as written.
func (f Form) matchOf(o Object, errs *[]FieldError) Object {
	match := Object{}
	for _, r := range f.Match {
		src := strings.TrimSpace(r.Source)
		if src == "" && r.Value == "" {
			continue
		}
		if src == "" {
			*errs = append(*errs, FieldError{"match", "a condition has a value but no source"})
			continue
		}
		match = append(match, Member{Key: src, Value: mustJSON(r.Value)})
	}
	if v, ok := o.Get("match"); ok {
		old, _ := ParseObject(v)
		for _, c := range old {
			var s string
			if json.Unmarshal(c.Value, &s) != nil {
				match = append(match, c)
			}
		}
	}
	return match
}

func mustJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Locate maps an error of the filter's parser to a form field when it is
// about the rule at rulePath ("" and false when it is about something
// else).
func Locate(e policy.FieldError, rulePath string) (FieldError, bool) {
	p := e.Path
	if p != rulePath && !strings.HasPrefix(p, rulePath+".") && !strings.HasPrefix(p, rulePath+"[") {
		return FieldError{}, false
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(p, rulePath), ".")
	field := ""
	switch {
	case rest == "name":
		field = "name"
	case rest == "mode":
		field = "mode"
	case rest == "scope":
		field = "scope"
	case rest == "algorithm":
		field = "algorithm"
	case rest == "action":
		field = "action"
	case rest == "deny_status" || rest == "reject_status" || rest == "enforce_percent" || rest == "from" || rest == "until":
		field = rest
	case strings.HasPrefix(rest, "schedule"):
		field = "schedule"
	case rest == "reject_body" || rest == "reject_content_type":
		field = rest
	case strings.HasPrefix(rest, "reject_headers"):
		field = "reject_headers"
	case strings.HasPrefix(rest, "limit_headers"):
		field = "limit_headers"
	case strings.HasPrefix(rest, "limit_keys"):
		field = "keys"
	case strings.HasPrefix(rest, "match"):
		field = "match"
	case rest == "algorithm_config.tokens_per_second" || rest == "algorithm_config.rps":
		field = "rate"
	case rest == "algorithm_config.burst":
		field = "burst"
	case rest == "algorithm_config.limit":
		field = "limit"
	case rest == "algorithm_config.window_seconds":
		field = "window"
	case rest == "algorithm_config.period_seconds":
		field = "period"
	}
	msg := e.Message
	if field == "" && rest != "" {
		msg = rest + ": " + msg
	}
	return FieldError{Field: field, Message: msg}, true
}

// object is the schedule as the configuration writes it, its fields in
// their usual order and the empty ones left out (the defaults).
func (s ScheduleFields) object() Object {
	var o Object
	if len(s.Days) > 0 {
		o.Set("days", s.Days)
	}
	for _, f := range []struct{ key, text string }{{"from", s.From}, {"until", s.Until}, {"time_zone", s.TimeZone}} {
		if t := strings.TrimSpace(f.text); t != "" {
			o.Set(f.key, t)
		}
	}
	return o
}
