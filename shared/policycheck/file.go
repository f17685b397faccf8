// Package policycheck runs a policy's tests: requests, the time between
// them and the answers they must get, decided by the filter's own code
// (shared/simulate). A team keeps a test file beside its policy and runs
// it in CI (`ratelimit-admin policy test`) before applying a change, so a
// change that would let the free tier through, or start refusing the
// health checks, is caught before any Envoy gets it.
//
// A test file is YAML (JSON is YAML too):
//
//	start: 2026-03-02T09:00:00Z        # the simulated clock (optional)
//	tests:
//	  - name: a free key gets a burst of 5, then 1 request a second
//	    request:                       # what each step sends, unless it says otherwise
//	      path: /v1/orders
//	      headers: {x-api-key: free-key-1}
//	    steps:
//	      - repeat: 5
//	        expect: {status: 200, rule: free}
//	      - expect: {status: 429, rule: free, headers: {retry-after: "1"}}
//	      - wait: 1s
//	        expect: {status: 200}
//
// Each test starts with every bucket full and every window empty, at the
// file's start time (or its own). Its requests are decided one after
// another, each from the state the ones before left, as one Envoy would
// decide them. See docs/policy-tests.md for every field.
package policycheck

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// Limits of a test file: room for any test a person writes, not for a
// load test.
const (
	MaxFileBytes = 4 << 20
	MaxRepeat    = 100_000   // requests in one step
	MaxRequests  = 1_000_000 // requests in one file
	MaxSteps     = 10_000    // steps (and one-step tests) in one file, YAML aliases expanded
	MaxWait      = 400 * 24 * time.Hour
)

// DefaultStart is the simulated clock's start when the file names none:
// a fixed time, so every run decides the same.
var DefaultStart = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Suite is a parsed test file.
type Suite struct {
	Tests []Test
}

// Test is one named sequence of steps, from fresh state.
type Test struct {
	Name  string
	Line  int       // where it starts in the file
	Start time.Time // the clock at its first step
	Steps []Step
}

// Step sends one request Repeat times, Every apart, after Wait, and
// checks each answer against Expect.
type Step struct {
	Line   int
	Path   string // "tests[0].steps[1]", for messages
	Wait   time.Duration
	Repeat int
	Every  time.Duration
	// InFlight: the step's admitted requests do not end; a concurrency
	// rule counts their places until the test ends (or its lease
	// expires, as in the filter).
	InFlight bool
	Request  simulate.Request
	Expect   Expect
}

// Expect is what each request of a step must get. A nil field is not
// checked.
type Expect struct {
	// Status is the status the client gets: 200 when the filter lets the
	// request through (the simulation has no upstream), else the
	// filter's reject_status or a deny rule's deny_status.
	Status *int
	// Rule is the rule whose answer it is: the rule that rejected or
	// denied the request, or whose RateLimit fields an allowed response
	// carries; "" for none.
	Rule *string
	// Identity is that rule's identity, as the request has it
	// ("header:x-api-key=free-key-1") or as the dashboard shows it, masked.
	Identity *string
	// Applies names, for some policies, the rule that applies ("" for
	// none), in the file's order.
	Applies []PolicyRule
	// Headers are response header fields: a value to equal, or nil for a
	// field that must be absent. UpstreamHeaders are the fields the
	// filter sets on the request sent upstream (the shadow header).
	Headers         []Field
	UpstreamHeaders []Field
	// ShadowRejected are the rules that would have rejected the request
	// but only counted it: shadow rules, and rules enforced on a share
	// of their clients that spare this one. Compared as a set.
	ShadowRejected *[]string
	// DelayMS is how long the filter holds the request (max_delay_ms).
	DelayMS *int64
	// GRPCStatus is the status a gRPC call gets, by name: "ok" when let
	// through, else the rejection's ("resource_exhausted").
	GRPCStatus *string
	// Body is the rejection's body ("" when let through).
	Body *string
}

// PolicyRule is one entry of Expect.Applies.
type PolicyRule struct {
	Policy, Rule string
}

// Field is an expected header field: Value nil for "absent".
type Field struct {
	Name  string // lower case
	Value *string
}

// Error is one problem of a test file, at Path (line Line).
type Error struct {
	Path    string
	Line    int
	Message string
}

func (e Error) Error() string {
	where := e.Path
	if where == "" {
		where = "the file"
	}
	if e.Line > 0 {
		where += " (line " + strconv.Itoa(e.Line) + ")"
	}
	return where + ": " + e.Message
}

// Errors are every problem found in a test file, in file order.
type Errors []Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// maxErrors stops a hopeless file's list early.
const maxErrors = 50

// Parse reads a test file. Its error is an Errors listing every problem,
// each naming the field and its line.
func Parse(data []byte) (*Suite, error) {
	if len(data) > MaxFileBytes {
		return nil, Errors{{Message: fmt.Sprintf("%d bytes; a test file holds at most %d", len(data), MaxFileBytes)}}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Errors{{Message: "not YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	r := &reader{}
	s := r.suite(&doc)
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	return s, nil
}

type reader struct {
	errs     Errors
	requests int
	steps    int
}

// done reports whether reading should stop: too many problems, or a file
// larger than a test file may be once its aliases are expanded.
func (r *reader) done() bool {
	return len(r.errs) >= maxErrors || r.requests > MaxRequests || r.steps > MaxSteps
}

func (r *reader) fail(path string, n *yaml.Node, format string, args ...any) {
	if len(r.errs) >= maxErrors {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	r.errs = append(r.errs, Error{Path: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

// fields returns a mapping's values by key, refusing keys not in known,
// duplicates and anything but a mapping.
func (r *reader) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.fail(path, n, "must be a mapping of %s", strings.Join(known, ", "))
		return nil
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		at := join(path, k.Value)
		switch {
		case k.Kind != yaml.ScalarNode:
			r.fail(path, k, "a key is not a name")
		case !contains(known, k.Value):
			r.fail(at, k, "unknown field; the fields here are %s", strings.Join(known, ", "))
		case out[k.Value] != nil:
			r.fail(at, k, "given twice")
		default:
			out[k.Value] = v
		}
	}
	return out
}

// resolve follows an alias (YAML's *name) to its anchor.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return resolve(n.Content[0])
	}
	return n
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// text reads a scalar as text (a number or a boolean too: the file's
// words, not YAML's types).
func (r *reader) text(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		r.fail(path, n, "must be a single value, not a list or a mapping")
		return "", false
	}
	if n.Tag == "!!null" {
		return "", true
	}
	return n.Value, true
}

func (r *reader) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	s, ok := r.text(n, path)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		r.fail(path, n, "%q is not a whole number from %d to %d", s, lo, hi)
		return 0, false
	}
	return v, true
}

func (r *reader) duration(n *yaml.Node, path string) (time.Duration, bool) {
	s, ok := r.text(n, path)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxWait {
		r.fail(path, n, "%q is not a duration from 0s to %s (like 500ms, 1s, 90m, 48h)", s, MaxWait)
		return 0, false
	}
	return d, true
}

func (r *reader) start(n *yaml.Node, path string) (time.Time, bool) {
	s, ok := r.text(n, path)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1971 || t.Year() > 9999 {
		r.fail(path, n, "%q is not a time like 2026-03-02T09:00:00Z (RFC 3339)", s)
		return time.Time{}, false
	}
	return t, true
}

func (r *reader) suite(doc *yaml.Node) *Suite {
	if len(doc.Content) == 0 {
		r.fail("", nil, "empty; a test file has a list of tests")
		return nil
	}
	f := r.fields(doc, "", "start", "tests")
	if f == nil {
		return nil
	}
	start := DefaultStart
	if n := f["start"]; n != nil {
		start, _ = r.start(n, "start")
	}
	list := f["tests"]
	if list == nil || resolve(list).Kind != yaml.SequenceNode || len(resolve(list).Content) == 0 {
		r.fail("tests", list, "required: a list of tests, each with a name, a request and what it must get")
		return nil
	}
	s := &Suite{}
	names := map[string]string{}
	for i, tn := range resolve(list).Content {
		if r.done() {
			break
		}
		path := "tests[" + strconv.Itoa(i) + "]"
		t := r.test(tn, path, start)
		if t == nil {
			continue
		}
		if prev, dup := names[t.Name]; dup {
			r.fail(path+".name", tn, "%q is also the name of %s; names tell the tests apart", t.Name, prev)
		}
		names[t.Name] = path
		s.Tests = append(s.Tests, *t)
	}
	return s
}

func (r *reader) test(n *yaml.Node, path string, start time.Time) *Test {
	f := r.fields(n, path, "name", "start", "request", "steps", "repeat", "every", "in_flight", "expect")
	if f == nil {
		return nil
	}
	t := &Test{Line: resolve(n).Line, Start: start}
	if nn := f["name"]; nn == nil {
		r.fail(path+".name", n, "required: what the test checks, in words")
	} else if t.Name, _ = r.text(nn, path+".name"); strings.TrimSpace(t.Name) == "" {
		r.fail(path+".name", nn, "required: what the test checks, in words")
	}
	if sn := f["start"]; sn != nil {
		t.Start, _ = r.start(sn, path+".start")
	}
	var base partial
	if rn := f["request"]; rn != nil {
		base = r.partial(rn, path+".request")
	}
	steps := f["steps"]
	single := f["expect"] != nil || f["repeat"] != nil || f["every"] != nil || f["in_flight"] != nil
	switch {
	case steps != nil && single:
		r.fail(path, n, "give either steps, or expect (with repeat and every) for a test of one step, not both")
		return nil
	case steps == nil && f["expect"] == nil:
		r.fail(path+".expect", n, "required: what the request must get (or steps, each with its expect)")
		return nil
	case steps == nil:
		if st, ok := r.step(f, n, path, base, true); ok {
			t.Steps = append(t.Steps, st)
		}
		return t
	}
	sn := resolve(steps)
	if sn.Kind != yaml.SequenceNode || len(sn.Content) == 0 {
		r.fail(path+".steps", steps, "must be a list of steps, each with what its request must get")
		return nil
	}
	for j, stn := range sn.Content {
		if r.done() {
			break
		}
		sp := path + ".steps[" + strconv.Itoa(j) + "]"
		sf := r.fields(stn, sp, "wait", "request", "repeat", "every", "in_flight", "expect")
		if sf == nil {
			continue
		}
		if sf["expect"] == nil {
			r.fail(sp+".expect", stn, "required: what the request must get")
			continue
		}
		if st, ok := r.step(sf, stn, sp, base, false); ok {
			t.Steps = append(t.Steps, st)
		}
	}
	return t
}

// step reads a step's fields (a test's own, for a test of one step:
// single) over the test's request.
func (r *reader) step(f map[string]*yaml.Node, n *yaml.Node, path string, base partial, single bool) (Step, bool) {
	st := Step{Line: resolve(n).Line, Path: path, Repeat: 1}
	before := len(r.errs)
	if wn := f["wait"]; wn != nil {
		st.Wait, _ = r.duration(wn, path+".wait")
	}
	if rn := f["repeat"]; rn != nil {
		v, _ := r.integer(rn, path+".repeat", 1, MaxRepeat)
		st.Repeat = int(v)
	}
	if en := f["every"]; en != nil {
		st.Every, _ = r.duration(en, path+".every")
	}
	if in := f["in_flight"]; in != nil {
		switch v, _ := r.text(in, path+".in_flight"); v {
		case "true":
			st.InFlight = true
		case "false":
		default:
			r.fail(path+".in_flight", in, "%q is not true or false", v)
		}
	}
	spec := base
	reqPath := path + ".request"
	if rn := f["request"]; rn != nil && !single {
		spec = base.with(r.partial(rn, reqPath))
	}
	if len(r.errs) == before {
		req, err := spec.spec().Build()
		if fe, ok := err.(*simulate.FieldError); ok {
			r.fail(join(reqPath, fe.Field), n, "%s", fe.Message)
		} else if err != nil {
			r.fail(reqPath, n, "%s", err)
		}
		st.Request = req
	}
	st.Expect = r.expect(f["expect"], path+".expect")
	r.requests += st.Repeat
	r.steps++
	if r.requests > MaxRequests {
		r.fail(path+".repeat", n, "the file sends more than %d requests; split it", MaxRequests)
	}
	if r.steps > MaxSteps {
		r.fail(path, n, "the file has more than %d steps; split it", MaxSteps)
	}
	return st, len(r.errs) == before
}

func (r *reader) expect(n *yaml.Node, path string) Expect {
	var e Expect
	f := r.fields(n, path, "status", "rule", "identity", "applies", "headers", "upstream_headers", "shadow_rejected", "delay_ms", "grpc_status", "body")
	if f == nil {
		return e
	}
	if len(f) == 0 {
		r.fail(path, n, "empty; say what the request must get (status, rule, headers...)")
	}
	if sn := f["status"]; sn != nil {
		if v, ok := r.integer(sn, path+".status", 100, 599); ok {
			s := int(v)
			e.Status = &s
		}
	}
	if rn := f["rule"]; rn != nil {
		if v, ok := r.text(rn, path+".rule"); ok {
			e.Rule = &v
		}
	}
	if in := f["identity"]; in != nil {
		if v, ok := r.text(in, path+".identity"); ok {
			e.Identity = &v
		}
	}
	if an := f["applies"]; an != nil {
		e.Applies = r.applies(an, path+".applies")
	}
	if hn := f["headers"]; hn != nil {
		e.Headers = r.headerFields(hn, path+".headers")
	}
	if hn := f["upstream_headers"]; hn != nil {
		e.UpstreamHeaders = r.headerFields(hn, path+".upstream_headers")
	}
	if sn := f["shadow_rejected"]; sn != nil {
		e.ShadowRejected = r.names(sn, path+".shadow_rejected")
	}
	if dn := f["delay_ms"]; dn != nil {
		if v, ok := r.integer(dn, path+".delay_ms", 0, 1<<40); ok {
			e.DelayMS = &v
		}
	}
	if gn := f["grpc_status"]; gn != nil {
		if v, ok := r.text(gn, path+".grpc_status"); ok {
			if name, known := grpcName(v); known {
				e.GRPCStatus = &name
			} else {
				r.fail(path+".grpc_status", gn, "%q is not a gRPC status: ok, resource_exhausted, unavailable, ... or a code from 0 to 16", v)
			}
		}
	}
	if bn := f["body"]; bn != nil {
		if v, ok := r.text(bn, path+".body"); ok {
			e.Body = &v
		}
	}
	return e
}

// grpcName is a gRPC status as the report names it: "ok", or the
// configuration's lower-case name, given by name (any case) or number.
func grpcName(v string) (string, bool) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "ok" || v == "0" {
		return "ok", true
	}
	for c := 1; c <= 16; c++ {
		if name := policy.GRPCCodeName(c); v == name || v == strconv.Itoa(c) {
			return name, true
		}
	}
	return "", false
}

// pairs returns a mapping's keys and values in file order (a duplicate
// key refused).
func (r *reader) pairs(n *yaml.Node, path, what string) (keys []*yaml.Node, vals []*yaml.Node) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.fail(path, n, "must be a mapping of %s", what)
		return nil, nil
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		name := strings.ToLower(k.Value)
		if k.Kind != yaml.ScalarNode || name == "" {
			r.fail(path, k, "a key is not a name")
			continue
		}
		if seen[name] {
			r.fail(join(path, k.Value), k, "given twice")
			continue
		}
		seen[name] = true
		keys, vals = append(keys, k), append(vals, n.Content[i+1])
	}
	return keys, vals
}

func (r *reader) applies(n *yaml.Node, path string) []PolicyRule {
	keys, vals := r.pairs(n, path, "policy names to the rule that applies (\"\" for none)")
	out := []PolicyRule{}
	for i, k := range keys {
		if v, ok := r.text(vals[i], join(path, k.Value)); ok {
			out = append(out, PolicyRule{Policy: k.Value, Rule: v})
		}
	}
	return out
}

func (r *reader) headerFields(n *yaml.Node, path string) []Field {
	keys, vals := r.pairs(n, path, "header names to their values (null: absent)")
	out := []Field{}
	for i, k := range keys {
		f := Field{Name: strings.ToLower(k.Value)}
		if !isNull(vals[i]) {
			v, ok := r.text(vals[i], join(path, k.Value))
			if !ok {
				continue
			}
			f.Value = &v
		}
		out = append(out, f)
	}
	return out
}

func (r *reader) names(n *yaml.Node, path string) *[]string {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		r.fail(path, n, "must be a list of rule names ([] for none)")
		return nil
	}
	out := []string{}
	for i, c := range n.Content {
		if v, ok := r.text(c, path+"["+strconv.Itoa(i)+"]"); ok {
			out = append(out, v)
		}
	}
	return &out
}

// partial is a request as a test or a step writes it: the fields given,
// which a step's request lays over its test's.
type partial struct {
	text     map[string]string  // method, path, host, client_address, peer_principal, route, cluster, connection
	headers  map[string]*string // nil: the step removes the test's header
	query    map[string]*string
	metadata json.RawMessage
	jwt      *string
	claims   json.RawMessage
	response *simulate.ResponseSpec
}

var textFields = []string{"method", "path", "host", "client_address", "peer_principal", "route", "cluster", "connection"}

func (r *reader) partial(n *yaml.Node, path string) partial {
	p := partial{text: map[string]string{}}
	f := r.fields(n, path, append(append([]string{}, textFields...), "headers", "query", "metadata", "jwt", "claims", "response")...)
	for _, name := range textFields {
		if v := f[name]; v != nil {
			p.text[name], _ = r.text(v, join(path, name))
		}
	}
	if v := f["headers"]; v != nil {
		p.headers = r.values(v, join(path, "headers"))
	}
	if v := f["query"]; v != nil {
		p.query = r.values(v, join(path, "query"))
	}
	if v := f["metadata"]; v != nil {
		p.metadata = r.object(v, join(path, "metadata"))
	}
	if v := f["jwt"]; v != nil {
		s, _ := r.text(v, join(path, "jwt"))
		p.jwt = &s
	}
	if v := f["claims"]; v != nil {
		p.claims = r.object(v, join(path, "claims"))
	}
	if v := f["response"]; v != nil {
		p.response = r.response(v, join(path, "response"))
	}
	if p.jwt != nil && p.claims != nil {
		r.fail(join(path, "jwt"), n, "give a token or claims, not both")
	}
	return p
}

func (r *reader) values(n *yaml.Node, path string) map[string]*string {
	keys, vals := r.pairs(n, path, "names to values")
	out := make(map[string]*string, len(keys))
	for i, k := range keys {
		if isNull(vals[i]) {
			out[k.Value] = nil
			continue
		}
		if v, ok := r.text(vals[i], join(path, k.Value)); ok {
			out[k.Value] = &v
		}
	}
	return out
}

// object reads a mapping as the JSON object it stands for.
func (r *reader) object(n *yaml.Node, path string) json.RawMessage {
	if resolve(n).Kind != yaml.MappingNode {
		r.fail(path, n, "must be a mapping")
		return nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		r.fail(path, n, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		r.fail(path, n, "cannot be written as JSON (are all its keys text?): %v", err)
		return nil
	}
	return b
}

func (r *reader) response(n *yaml.Node, path string) *simulate.ResponseSpec {
	f := r.fields(n, path, "status", "headers", "trailers", "body")
	if f == nil {
		return nil
	}
	resp := &simulate.ResponseSpec{}
	if v := f["status"]; v != nil {
		s, _ := r.integer(v, join(path, "status"), 100, 599)
		resp.Status = int(s)
	}
	flat := func(name string) map[string]string {
		m := map[string]string{}
		if v := f[name]; v != nil {
			for k, s := range r.values(v, join(path, name)) {
				if s != nil {
					m[k] = *s
				}
			}
		}
		return m
	}
	resp.Headers, resp.Trailers = flat("headers"), flat("trailers")
	if v := f["body"]; v != nil {
		resp.Body, _ = r.text(v, join(path, "body"))
	}
	return resp
}

// with lays o (a step's request) over p (its test's): o's fields replace
// p's, header by header and parameter by parameter for headers and
// query, a token replacing claims and claims a token.
func (p partial) with(o partial) partial {
	out := partial{text: map[string]string{}, headers: merge(p.headers, o.headers, strings.ToLower), query: merge(p.query, o.query, nil),
		metadata: p.metadata, jwt: p.jwt, claims: p.claims, response: p.response}
	for k, v := range p.text {
		out.text[k] = v
	}
	for k, v := range o.text {
		out.text[k] = v
	}
	if o.metadata != nil {
		out.metadata = o.metadata
	}
	if o.jwt != nil {
		out.jwt, out.claims = o.jwt, nil
	}
	if o.claims != nil {
		out.jwt, out.claims = nil, o.claims
	}
	if o.response != nil {
		out.response = o.response
	}
	return out
}

// merge lays b over a, their names compared as fold makes them (header
// names are case-insensitive, query parameter names are not).
func merge(a, b map[string]*string, fold func(string) string) map[string]*string {
	if fold == nil {
		fold = func(s string) string { return s }
	}
	out := make(map[string]*string, len(a)+len(b))
	for k, v := range a {
		out[fold(k)] = v
	}
	for k, v := range b {
		out[fold(k)] = v
	}
	return out
}

// spec is the request the simulator checks and builds.
func (p partial) spec() simulate.RequestSpec {
	s := simulate.RequestSpec{Method: p.text["method"], Path: p.text["path"], Host: p.text["host"],
		ClientAddress: p.text["client_address"], PeerPrincipal: p.text["peer_principal"], Route: p.text["route"], Cluster: p.text["cluster"],
		Connection: simulate.ConnectionSpec(p.text["connection"]),
		Metadata:   p.metadata, Claims: p.claims, Response: p.response}
	if p.jwt != nil {
		s.JWT = *p.jwt
	}
	flat := func(m map[string]*string) map[string]string {
		out := make(map[string]string, len(m))
		for k, v := range m {
			if v != nil {
				out[k] = *v
			}
		}
		return out
	}
	s.Headers, s.Query = flat(p.headers), flat(p.query)
	return s
}
