package web

import (
	"slices"
	"strconv"
	"strings"
)

// RulesView is the structured view of the draft: its policies and rules
// in words.
type RulesView struct {
	Error    string // the draft cannot be listed (not JSON): the JSON view still works
	Policies []RulesPolicy
	Editing  *RuleFormView // the rule form, when a rule is being edited
}

// RulesPolicy is one policy of the draft.
type RulesPolicy struct {
	Index int
	Name  string
	Rules []RuleRow
	// ReadOnly: the policy is outside the policies the editor may change;
	// its rules are listed without their buttons.
	ReadOnly bool
}

// RuleRow is one rule in words.
type RuleRow struct {
	Ref       string // "<policy>:<rule>", the value of its buttons
	Name      string
	Matches   string
	Keys      string
	Limit     string
	Algorithm string
	Mode      string
	Extra     string // members the form keeps without editing them
	Overrides int    // entries of its "overrides"
	// Timed counts the overrides bounded in time (from, until), Weekly
	// those with a schedule; Next is when the next bound starts or ends
	// ("" when none will).
	Timed, Weekly int
	Next          string
	// Time is when the rule applies in words ("from ... until ...",
	// "weekly: ..."), "" for always; TimeState is "later", "now", "ended"
	// or "weekly".
	Time      string
	TimeState string
	First     bool
	Last      bool
}

// TimeBadge is the word shown beside a rule's time.
func (r RuleRow) TimeBadge() string {
	switch r.TimeState {
	case "later":
		return "not yet"
	case "ended":
		return "ended"
	case "weekly":
		return "on a schedule"
	}
	return "applies now"
}

// TimedText says how many overrides hold for a time and when the next
// bound comes: "(2 for a time; the next starts or ends ...)".
func (r RuleRow) TimedText() string {
	var parts []string
	if r.Timed > 0 {
		parts = append(parts, strconv.Itoa(r.Timed)+" for a time")
	}
	if r.Weekly > 0 {
		parts = append(parts, strconv.Itoa(r.Weekly)+" weekly")
	}
	s := "(" + strings.Join(parts, ", ")
	if r.Next != "" {
		s += "; the next starts or ends " + r.Next
	}
	return s + ")"
}

// LimitText is the rule's limit and keys in words: "10/s, burst 20, per
// header:x-api-key", or for a rule that limits nothing what it does.
func (r RuleRow) LimitText() string {
	if r.Keys == "" {
		return r.Limit
	}
	return r.Limit + ", " + r.Keys
}

// RuleFormView is the rule form.
type RuleFormView struct {
	Ref  string
	Path string // the rule's JSON path
	Name string
	Mode string
	// Scope is where a limit rule counts: "" (each Envoy process),
	// "local" (the same, written out) or "global" (across the fleet).
	Scope      string
	Action     string // "" or "limit", "exempt", "unlimited", "deny"
	DenyStatus string
	// RejectStatus is a limit rule's own reject_status, "" for the
	// configuration's.
	RejectStatus string
	// OwnLimit, OwnRemaining and OwnReset name the fields a limit rule's
	// own numbers are sent as (limit_headers), "" for none.
	OwnLimit, OwnRemaining, OwnReset string
	// EnforcePercent: the share of identities a limit rule is enforced
	// on, "" for all.
	EnforcePercent string
	Algorithm      string
	Rate           string
	Burst          string
	Block          string // block_seconds
	Limit          string
	Window         string
	Period         string
	Keys           []LimitKeyRow
	Match          []MatchCondRow
	Kept           []string // match conditions kept as they are
	// Reject: the rule has its own rejection body, RejectBody (maybe
	// empty), sent as RejectContentType ("": from the body).
	Reject            bool
	RejectBody        string
	RejectContentType string
	// OwnHeaders: the rule has its own reject_headers, RejectHeaders
	// ("name: value" lines, maybe none).
	OwnHeaders    bool
	RejectHeaders string
	From, Until   string // when the rule applies (RFC 3339), "" for no bound
	// The weekly schedule: its days ("mon".."sun"), from, until and time
	// zone ("" for the defaults).
	Days                                []string
	WeeklyFrom, WeeklyUntil, WeeklyZone string
	Errors                              map[string]string // by field: name, mode, action, deny_status, enforce_percent, from, until, reject_body, reject_content_type, algorithm, rate, burst, limit, window, period, keys, match, ""
}

// Weekdays are the days the rule form offers for a schedule.
var Weekdays = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// HasDay reports whether the schedule lists day.
func (f *RuleFormView) HasDay(day string) bool { return slices.Contains(f.Days, day) }

// LimitKeyRow is one limit key: a source kind and, for header/query/jwt, a name.
type LimitKeyRow struct{ Kind, Name string }

// MatchCondRow is one match condition.
type MatchCondRow struct{ Source, Value string }

// KeyKinds are the key sources offered by the picker.
var KeyKinds = []string{"ip:address", "ip:network", "peer:principal", "header", "query", "jwt", "cookie", "metadata", "path", "method", "host", "route", "cluster", "connection", "all"}

// Algorithms offered by the rule form.
var Algorithms = []string{"token_bucket", "fixed_window", "sliding_window", "rolling_window", "quota", "concurrency"}
