package policycheck

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// Report is the outcome of a suite: one result per test, in file order.
type Report struct {
	Tests []Result
	// Unexercised are the rules no request of the tests applied, in the
	// configuration's order ("policy/rule"): what the tests do not cover.
	Unexercised []string
}

// Failed counts the tests that failed.
func (r Report) Failed() int {
	n := 0
	for _, t := range r.Tests {
		if t.Failure != nil {
			n++
		}
	}
	return n
}

// Result is one test's outcome.
type Result struct {
	Name string
	Line int
	// Requests counts the requests decided (up to the failing one).
	Requests int
	// Failure is the first request that did not get what its step
	// expects (nil when the test passed). The test stops there: what
	// follows would be decided from a state the test did not intend.
	Failure *Failure
}

// Failure is a request that did not get what its step expects.
type Failure struct {
	Step    string // "tests[0].steps[1]"
	Line    int
	Request int           // 1-based, within the step's repeats
	Repeat  int           // the step's repeats
	At      time.Duration // since the test's start
	// Mismatches are the expected fields that differ, each in words
	// ("status: got 200, want 429").
	Mismatches []string
	// Context says how the filter decided: each policy's applying rule
	// with its identity, cost and level, or why none applies.
	Context []string
}

// Options are hooks for tests of this package's users.
type Options struct {
	// Observe, when set, sees every request decided: the tests comparing
	// the simulator with the compiled filter replay them.
	Observe func(Sent)
}

// Sent is a request a test sent, and how the simulator decided it.
type Sent struct {
	Test     int // its test's index in the suite
	At       time.Time
	Request  simulate.Request
	Result   simulate.Result
	InFlight bool // the request does not end (the step's in_flight)
}

// Run runs every test of s against cfg.
func Run(cfg *policy.Config, s *Suite, opt Options) Report {
	rep := Report{Tests: make([]Result, 0, len(s.Tests))}
	seen := map[string]bool{}
	observe := opt.Observe
	opt.Observe = func(sent Sent) {
		for _, p := range sent.Result.Policies {
			if p.Applied >= 0 {
				seen[p.Name+"/"+p.Rules[p.Applied].Name] = true
			}
		}
		if observe != nil {
			observe(sent)
		}
	}
	for i := range s.Tests {
		rep.Tests = append(rep.Tests, runTest(cfg, i, &s.Tests[i], opt))
	}
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			if name := p.Name + "/" + r.Name; !seen[name] {
				rep.Unexercised = append(rep.Unexercised, name)
			}
		}
	}
	return rep
}

type stateKey struct{ rule, identity string }

func runTest(cfg *policy.Config, index int, t *Test, opt Options) Result {
	out := Result{Name: t.Name, Line: t.Line}
	if f := unknownNames(cfg, t); f != nil {
		out.Failure = f
		return out
	}
	states := map[stateKey]simulate.State{}
	lookup := func(r *policy.Rule, identity string) (simulate.State, bool) {
		st, ok := states[stateKey{r.Name, identity}]
		return st, ok
	}
	at := time.Duration(0)
	for si := range t.Steps {
		st := &t.Steps[si]
		at += st.Wait
		for n := 1; n <= st.Repeat; n++ {
			if n > 1 {
				at += st.Every
			}
			when := t.Start.Add(at)
			res := simulate.Run(cfg, st.Request, simulate.Options{Now: limiter.Seconds(when.UnixNano()), Lookup: lookup})
			out.Requests++
			if opt.Observe != nil {
				opt.Observe(Sent{Test: index, At: when, Request: st.Request, Result: res, InFlight: st.InFlight})
			}
			if bad := mismatches(&st.Expect, &res); len(bad) > 0 {
				out.Failure = &Failure{Step: st.Path, Line: st.Line, Request: n, Repeat: st.Repeat, At: at,
					Mismatches: bad, Context: context(&st.Expect, &res)}
				return out
			}
			for _, s := range res.Stores() {
				states[stateKey{s.Rule, s.Identity}] = s.State
			}
			if st.InFlight {
				keepInFlight(&res, states)
			}
		}
	}
	return out
}

// keepInFlight stores, for the concurrency rules that admitted a request
// that does not end, the state with its place taken.
func keepInFlight(res *simulate.Result, states map[stateKey]simulate.State) {
	if res.Status != 0 {
		return
	}
	for _, p := range res.Policies {
		if p.Applied < 0 {
			continue
		}
		if rr := &p.Rules[p.Applied]; rr.Held != nil {
			states[stateKey{rr.Name, rr.Identity}] = *rr.Held
		}
	}
}

// unknownNames fails a test that names a policy or rule the
// configuration does not have: a typo would otherwise read as a wrong
// decision.
func unknownNames(cfg *policy.Config, t *Test) *Failure {
	rules := map[string]bool{"": true}
	policies := map[string]map[string]bool{}
	for _, p := range cfg.Policies {
		policies[p.Name] = map[string]bool{"": true}
		for _, r := range p.Rules {
			rules[r.Name] = true
			policies[p.Name][r.Name] = true
		}
	}
	for _, st := range t.Steps {
		var bad []string
		e := &st.Expect
		if e.Rule != nil && !rules[*e.Rule] {
			bad = append(bad, "rule: no rule is named "+strconv.Quote(*e.Rule))
		}
		for _, pr := range e.Applies {
			switch {
			case policies[pr.Policy] == nil:
				bad = append(bad, "applies: no policy is named "+strconv.Quote(pr.Policy))
			case !policies[pr.Policy][pr.Rule]:
				bad = append(bad, "applies."+pr.Policy+": policy "+strconv.Quote(pr.Policy)+" has no rule named "+strconv.Quote(pr.Rule))
			}
		}
		if e.ShadowRejected != nil {
			for _, name := range *e.ShadowRejected {
				if !rules[name] || name == "" {
					bad = append(bad, "shadow_rejected: no rule is named "+strconv.Quote(name))
				}
			}
		}
		if len(bad) > 0 {
			return &Failure{Step: st.Path, Line: st.Line, Mismatches: bad}
		}
	}
	return nil
}

// mismatches lists the expected fields res does not have (formatting
// only what differs: a test file may send a million requests).
func mismatches(e *Expect, res *simulate.Result) []string {
	var bad []string
	differ := func(field, got, want string) {
		bad = append(bad, field+": got "+got+", want "+want)
	}
	if e.Status != nil && status(res) != *e.Status {
		differ("status", strconv.Itoa(status(res)), strconv.Itoa(*e.Status))
	}
	if e.Rule != nil && res.Rule != *e.Rule {
		differ("rule", quoteOrNone(res.Rule), quoteOrNone(*e.Rule))
	}
	if e.Identity != nil {
		// as the test wrote it, or as the dashboard shows it
		if a := answering(res); *e.Identity != a.Key && *e.Identity != a.Identity {
			differ("identity", quoteOrNone(a.Identity), quoteOrNone(*e.Identity))
		}
	}
	for _, pr := range e.Applies {
		if got := applied(res, pr.Policy); got != pr.Rule {
			differ("applies."+pr.Policy, quoteOrNone(got), quoteOrNone(pr.Rule))
		}
	}
	bad = append(bad, fieldMismatches("headers", e.Headers, res.Headers)...)
	bad = append(bad, fieldMismatches("upstream_headers", e.UpstreamHeaders, res.Upstream)...)
	if e.ShadowRejected != nil {
		got, want := shadowRejected(res), slices.Clone(*e.ShadowRejected)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			differ("shadow_rejected", list(got), list(want))
		}
	}
	if e.DelayMS != nil && res.DelayMS != *e.DelayMS {
		differ("delay_ms", strconv.FormatInt(res.DelayMS, 10), strconv.FormatInt(*e.DelayMS, 10))
	}
	if e.GRPCStatus != nil {
		got := "ok"
		if res.Status != 0 {
			got = policy.GRPCCodeName(res.GRPCStatus)
		}
		if got != *e.GRPCStatus {
			differ("grpc_status", got, *e.GRPCStatus)
		}
	}
	if e.Body != nil && res.Body != *e.Body {
		differ("body", strconv.Quote(res.Body), strconv.Quote(*e.Body))
	}
	return bad
}

// status is the status the client gets: 200 for a request sent upstream.
func status(res *simulate.Result) int {
	if res.Status == 0 {
		return 200
	}
	return res.Status
}

func quoteOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return strconv.Quote(s)
}

func list(names []string) string {
	if len(names) == 0 {
		return "[]"
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// answering returns the rule whose answer the response is (an empty
// result for none).
func answering(res *simulate.Result) *simulate.RuleResult {
	if rr := res.RuleNamed(res.Rule); rr != nil && res.Rule != "" {
		return rr
	}
	return &simulate.RuleResult{}
}

func applied(res *simulate.Result, policyName string) string {
	for _, p := range res.Policies {
		if p.Name == policyName && p.Applied >= 0 {
			return p.Rules[p.Applied].Name
		}
	}
	return ""
}

// shadowRejected lists, sorted, the applying rules that refused the
// request without rejecting it: shadow rules and rules sparing this
// client (a deny rule in shadow mode among them).
func shadowRejected(res *simulate.Result) []string {
	names := []string{}
	for _, p := range res.Policies {
		if p.Applied < 0 {
			continue
		}
		rr := &p.Rules[p.Applied]
		shadow := rr.Mode == policy.ModeShadow || rr.Spared
		switch {
		case !shadow:
		case rr.Action == policy.ActionDeny:
			names = append(names, rr.Name)
		case rr.Action == policy.ActionLimit && !rr.Decision.Allowed:
			names = append(names, rr.Name)
		}
	}
	slices.Sort(names)
	return names
}

func fieldMismatches(where string, want []Field, got [][2]string) []string {
	var bad []string
	for _, f := range want {
		v, ok := "", false
		for _, g := range got {
			if g[0] == f.Name {
				v, ok = g[1], true
				break
			}
		}
		switch {
		case f.Value == nil && ok:
			bad = append(bad, fmt.Sprintf("%s.%s: got %s, want it absent", where, f.Name, quoteValue(v)))
		case f.Value != nil && !ok:
			bad = append(bad, fmt.Sprintf("%s.%s: absent, want %s", where, f.Name, quoteValue(*f.Value)))
		case f.Value != nil && v != *f.Value:
			bad = append(bad, fmt.Sprintf("%s.%s: got %s, want %s", where, f.Name, quoteValue(v), quoteValue(*f.Value)))
		}
	}
	return bad
}

// context says how the request was decided, in words: for every policy,
// the rule that applies and its state, or why none does; and for a rule
// the step expects to apply but does not, why.
func context(e *Expect, res *simulate.Result) []string {
	var out []string
	for _, p := range res.Policies {
		if p.Applied < 0 {
			out = append(out, fmt.Sprintf("policy %q: no rule applies", p.Name))
			continue
		}
		out = append(out, fmt.Sprintf("policy %q: %s", p.Name, describe(&p.Rules[p.Applied])))
	}
	for _, pr := range e.Applies {
		if pr.Rule == "" || applied(res, pr.Policy) == pr.Rule {
			continue
		}
		if rr := res.RuleNamed(pr.Rule); rr != nil && rr.Why != "" {
			out = append(out, fmt.Sprintf("rule %q does not apply: %s", pr.Rule, rr.Why))
		}
	}
	return out
}

// describe is an applying rule in words.
func describe(rr *simulate.RuleResult) string {
	s := fmt.Sprintf("rule %q applies", rr.Name)
	if rr.Mode == policy.ModeShadow {
		s += " (shadow)"
	}
	switch rr.Action {
	case policy.ActionExempt, policy.ActionUnlimited, policy.ActionDeny:
		return s + ": " + rr.Action
	}
	if !rr.Applies {
		return s
	}
	cost := "cost " + num(rr.Cost)
	if rr.ChargedLater {
		cost = "charged when the response arrives"
		if c := rr.Response; c != nil && c.Charged {
			cost += " (" + num(c.Cost) + ")"
		}
	}
	s += fmt.Sprintf(" to %s, %s, %s available", rr.Identity, cost, num(rr.Level))
	switch {
	case !rr.Decision.Allowed && (rr.Spared || rr.Mode == policy.ModeShadow):
		s += fmt.Sprintf(": would refuse (retry in %ss), counted only", num(rr.Decision.Wait))
	case !rr.Decision.Allowed:
		s += fmt.Sprintf(": refuses, retry in %ss", num(rr.Decision.Wait))
	default:
		s += fmt.Sprintf(": admits, %s left", num(rr.Decision.Remaining))
	}
	return s
}

// quoteValue quotes a header value as the test file would: in single
// quotes when it holds double quotes (RateLimit fields do), so the report
// can be pasted back.
func quoteValue(v string) string {
	if strings.Contains(v, `"`) && !strings.ContainsAny(v, "'\\") && strconv.CanBackquote(v) {
		return "'" + v + "'"
	}
	return strconv.Quote(v)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
