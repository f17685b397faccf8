package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/simulate"
	"github.com/sluice-rl/sluice/shared/state"
)

// The request simulator (docs/admin.md "Request simulator"): POST
// /api/v1/policy/simulate and the simulator on the policy page run
// shared/simulate on a request and a policy (the current one, a stored
// version or an unsaved draft), with the bucket states telemetry knows.

// Limits on a simulated request: what a proxy would accept, not more.
const (
	maxSimHeaders     = 100
	maxSimHeaderValue = 8 << 10
	maxSimHeaderBytes = 60 << 10 // Envoy's default max_request_headers_kb
	maxSimPath        = 8 << 10
	maxSimPeer        = 2 << 10
	maxSimRoute       = 1 << 10
	maxSimMetadata    = 16 << 10
)

// simRequest is a simulated request as the API and the page take it.
type simRequest struct {
	Method        string            `json:"method"`
	Path          string            `json:"path"`
	Host          string            `json:"host"`
	Headers       map[string]string `json:"headers"`
	Query         map[string]string `json:"query"`
	ClientAddress string            `json:"client_address"`
	// PeerPrincipal is the URI SAN of the client's TLS certificate, for
	// peer:principal ("" for a client without one).
	PeerPrincipal string `json:"peer_principal"`
	// Route is the name of the Envoy route the request matched, for the
	// route source ("" for none).
	Route string `json:"route"`
	// Metadata is the request's Envoy dynamic metadata, for metadata:
	// sources: an object of namespaces, each an object (simMetadata).
	Metadata json.RawMessage `json:"metadata"`
	// JWT is a bearer token ("Bearer " optional); Claims a JSON object
	// sent as the payload of an unsigned token (the filter never checks
	// signatures). At most one of them.
	JWT    string          `json:"jwt"`
	Claims json.RawMessage `json:"claims"`
	// Response is a sample of the upstream's answer (optional).
	Response *simResponse `json:"response"`
}

// simText checks a text field read from an Envoy property: trimmed, at
// most max bytes, no rune that bad refuses (why says what is wrong).
func simText(field, v string, max int, bad func(rune) bool, why string) (string, error) {
	v = strings.TrimSpace(v)
	switch {
	case len(v) > max:
		return "", simInputError(field, fmt.Sprintf("is %d bytes long; at most %d are allowed here", len(v), max))
	case strings.IndexFunc(v, bad) >= 0:
		return "", simInputError(field, fmt.Sprintf("%q %s", shortText(v), why))
	}
	return v, nil
}

// notURIByte refuses what a URI never holds: spaces, controls, non-ASCII.
func notURIByte(r rune) bool { return r < 0x21 || r > 0x7e }

func simInputError(field, msg string) error {
	return &policies.InputError{Field: "request." + field, Message: msg}
}

// build checks the request and turns it into what the filter would see.
// Every refusal names its field.
func (b simRequest) build() (simulate.Request, error) {
	req := simulate.Request{Method: strings.TrimSpace(b.Method), Path: b.Path, Host: strings.TrimSpace(b.Host), Headers: map[string]string{}}
	if req.Method == "" {
		req.Method = "GET"
	}
	if !isToken(req.Method) || len(req.Method) > 32 {
		return req, simInputError("method", fmt.Sprintf("%q is not an HTTP method", shortText(req.Method)))
	}
	if req.Path == "" {
		req.Path = "/"
	}
	if len(req.Path) > maxSimPath {
		return req, simInputError("path", fmt.Sprintf("%d bytes; the limit is %d", len(req.Path), maxSimPath))
	}
	if req.Path[0] != '/' || strings.ContainsAny(req.Path, " \r\n\t\x00") {
		return req, simInputError("path", fmt.Sprintf("%q must start with / and contain no spaces or control characters", shortText(req.Path)))
	}
	if len(b.Query) > 0 {
		names := sortedKeys(b.Query)
		sep := "?"
		if strings.Contains(req.Path, "?") {
			sep = "&"
		}
		for _, n := range names {
			if n == "" {
				return req, simInputError("query", "a parameter name is empty")
			}
			req.Path += sep + queryEscape(n) + "=" + queryEscape(b.Query[n])
			sep = "&"
		}
		if len(req.Path) > maxSimPath {
			return req, simInputError("query", fmt.Sprintf("the path with its query is %d bytes; the limit is %d", len(req.Path), maxSimPath))
		}
	}
	if req.Host == "" {
		req.Host = "example.com"
	}
	if len(req.Host) > 255 || strings.ContainsAny(req.Host, " /\r\n\t\x00") {
		return req, simInputError("host", fmt.Sprintf("%q is not a host name", shortText(req.Host)))
	}
	if err := simHeaders("headers", b.Headers, req.Headers); err != nil {
		return req, err
	}
	if b.ClientAddress == "" {
		b.ClientAddress = "192.0.2.1"
	}
	addr := strings.TrimSpace(b.ClientAddress)
	if _, err := netip.ParseAddrPort(addr); err != nil {
		if _, err := netip.ParseAddr(addr); err != nil {
			return req, simInputError("client_address", fmt.Sprintf("%q is not an IP address (with or without a port)", shortText(addr)))
		}
	}
	req.ClientAddress = addr
	var err error
	if req.PeerPrincipal, err = simText("peer_principal", b.PeerPrincipal, maxSimPeer, notURIByte,
		"is not a URI: it has a space, a control character or a byte outside ASCII"); err != nil {
		return req, err
	}
	if req.Route, err = simText("route", b.Route, maxSimRoute, unicode.IsControl, "contains a control character"); err != nil {
		return req, err
	}
	if req.Metadata, err = simMetadata(b.Metadata); err != nil {
		return req, err
	}
	hasClaims := len(b.Claims) > 0 && string(b.Claims) != "null"
	if b.JWT != "" && hasClaims {
		return req, simInputError("jwt", "give a token or claims, not both")
	}
	if b.JWT != "" {
		tok := strings.TrimSpace(b.JWT)
		if len(tok) < 7 || !strings.EqualFold(tok[:7], "bearer ") {
			tok = "Bearer " + tok
		}
		var c request.Claims
		if !request.ParseJWT(tok, &c) {
			return req, simInputError("jwt", fmt.Sprintf("not a JWT the filter can read: it needs three base64url segments whose middle one is a JSON object, at most %d bytes", request.MaxJWT))
		}
		req.Headers["authorization"] = tok
	}
	if hasClaims {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b.Claims, &obj); err != nil || obj == nil {
			return req, simInputError("claims", "must be a JSON object of claims")
		}
		enc := base64.RawURLEncoding.EncodeToString
		tok := "Bearer " + enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(b.Claims) + ".unsigned"
		var c request.Claims
		if !request.ParseJWT(tok, &c) {
			return req, simInputError("claims", fmt.Sprintf("too large for a token: at most %d bytes once encoded", request.MaxJWT))
		}
		req.Headers["authorization"] = tok
	}
	if b.Response != nil {
		resp, err := b.Response.build()
		if err != nil {
			return req, err
		}
		req.Response = &resp
	}
	return req, nil
}

// simHeaders checks a header map given as field and puts it, names
// lower-cased, into out.
func simHeaders(field string, in, out map[string]string) error {
	if len(in) > maxSimHeaders {
		return simInputError(field, fmt.Sprintf("%d headers; the limit is %d", len(in), maxSimHeaders))
	}
	total := 0
	for _, n := range sortedKeys(in) {
		v := in[n]
		name := strings.ToLower(strings.TrimSpace(n))
		at := field + "." + shortText(n)
		if name == "" || !isToken(name) {
			return simInputError(at, "not a valid header name")
		}
		if len(v) > maxSimHeaderValue {
			return simInputError(at, fmt.Sprintf("the value is %d bytes; the limit is %d", len(v), maxSimHeaderValue))
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return simInputError(at, "the value contains a line break or NUL")
		}
		total += len(name) + len(v)
		if total > maxSimHeaderBytes {
			return simInputError(field, fmt.Sprintf("the headers exceed %d bytes in all (Envoy's default limit)", maxSimHeaderBytes))
		}
		out[name] = v
	}
	return nil
}

// simResponse is a sample of the upstream's answer: the rules whose cost
// comes from the response are charged for it.
type simResponse struct {
	Status   int               `json:"status"`
	Headers  map[string]string `json:"headers"`
	Trailers map[string]string `json:"trailers"`
	Body     string            `json:"body"`
}

// maxSimBody bounds a sample response's body.
const maxSimBody = 48 << 10 // within the API's 64 KiB request limit

func (b simResponse) build() (simulate.Response, error) {
	resp := simulate.Response{Status: b.Status, Headers: map[string]string{}, Trailers: map[string]string{}, Body: []byte(b.Body)}
	if resp.Status == 0 {
		resp.Status = 200
	}
	if resp.Status < 100 || resp.Status > 599 {
		return resp, simInputError("response.status", fmt.Sprintf("%d is not an HTTP status (100 to 599)", b.Status))
	}
	if err := simHeaders("response.headers", b.Headers, resp.Headers); err != nil {
		return resp, err
	}
	if err := simHeaders("response.trailers", b.Trailers, resp.Trailers); err != nil {
		return resp, err
	}
	if len(b.Body) > maxSimBody {
		return resp, simInputError("response.body", fmt.Sprintf("is %d bytes; at most %d are simulated", len(b.Body), maxSimBody))
	}
	return resp, nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func shortText(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// queryEscape escapes a query component so request.QueryParam decodes it
// back.
func queryEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// simPolicy is the policy a simulation runs against: the draft when given,
// else the stored version when given, else the current one.
type simPolicy struct {
	cfg   *policy.Config
	label string // "the current policy (v3)", "v2", "the draft"
}

func (s *server) loadSimPolicy(ctx context.Context, draft []byte, version *int64) (simPolicy, error) {
	if len(draft) > 0 && version != nil {
		return simPolicy{}, &policies.InputError{Field: "version", Message: "give a draft policy or a version, not both"}
	}
	label := "the draft"
	if len(draft) == 0 {
		var v policies.Version
		var err error
		if version != nil {
			v, err = s.Policies.Get(ctx, *version)
			label = "v" + strconv.FormatInt(*version, 10)
		} else {
			v, err = s.Policies.Current(ctx)
			label = fmt.Sprintf("the current policy (v%d)", v.Number)
		}
		if err != nil {
			return simPolicy{}, err
		}
		draft = v.JSON
	}
	norm, err := policies.Validate(draft) // refused like a save, with every error
	if err != nil {
		return simPolicy{}, err
	}
	cfg, err := policy.Parse(norm)
	if err != nil {
		return simPolicy{}, err
	}
	return simPolicy{cfg: cfg, label: label}, nil
}

// telemetryLookup returns the bucket states telemetry reported (token
// buckets: windows are reported as their quota left, not their counts,
// so they are simulated fresh). nil without telemetry.
func (s *server) telemetryLookup(now time.Time) simulate.Lookup {
	if s.Telemetry == nil {
		return nil
	}
	st := s.Telemetry.State
	return func(r *policy.Rule, identity string) (simulate.State, bool) {
		if r.Window != nil {
			return simulate.State{}, false
		}
		keys, _ := st.Search(now, identity, 100)
		for _, k := range keys {
			if k.Rule == r.Name && k.Identity == identity && k.Algorithm == "" {
				return simulate.State{Bucket: state.Bucket{Tokens: k.Tokens, LastRefill: k.LastRefill}}, true
			}
		}
		return simulate.State{}, false
	}
}

// simResultJSON is the API's answer.
type simResultJSON struct {
	Policy   string          `json:"policy"`
	Decision simDecisionJSON `json:"decision"`
	Policies []simPolicyJSON `json:"policies"`
}

type simDecisionJSON struct {
	Allowed         bool        `json:"allowed"`
	Status          int         `json:"status,omitempty"`
	Rule            string      `json:"rule,omitempty"`
	Headers         [][2]string `json:"headers"`
	Body            string      `json:"body,omitempty"`
	GRPCStatus      string      `json:"grpc_status,omitempty"` // a gRPC call's status, by name
	UpstreamHeaders [][2]string `json:"upstream_headers,omitempty"`
	DelayMS         int64       `json:"delay_ms,omitempty"`
}

type simPolicyJSON struct {
	Name    string        `json:"name"`
	Applied string        `json:"applied_rule,omitempty"`
	Rules   []simRuleJSON `json:"rules"`
}

type simRuleJSON struct {
	Name      string  `json:"name"`
	Mode      string  `json:"mode"`
	Algorithm string  `json:"algorithm,omitempty"`
	Action    string  `json:"action"`
	Applies   bool    `json:"applies"`
	Why       string  `json:"why_not,omitempty"`
	Identity  string  `json:"identity,omitempty"`
	Cost      float64 `json:"cost,omitempty"`
	// StateKnown: telemetry reported this identity's bucket; Level is
	// the tokens (quota) available before the request either way.
	StateKnown bool          `json:"state_known,omitempty"`
	Level      *float64      `json:"level,omitempty"`
	Decision   *simRuleDecis `json:"decision,omitempty"`
	Global     bool          `json:"global,omitempty"`
	// Overridden: one of the rule's overrides gave this identity its
	// limits; ChargedLater: the cost comes from the response; Spared:
	// the rule is enforced on a share of its identities, not this one.
	Overridden   bool `json:"overridden,omitempty"`
	ChargedLater bool `json:"charged_later,omitempty"`
	Spared       bool `json:"spared,omitempty"`
	// Response: what the sample response is charged (charged_later
	// rules that admitted the request, when the request has a response).
	Response *simChargeJSON `json:"response,omitempty"`
}

type simChargeJSON struct {
	Charged   bool    `json:"charged"`
	Cost      float64 `json:"cost"`
	Why       string  `json:"why"`
	Remaining float64 `json:"remaining_after"`
}

type simRuleDecis struct {
	Allowed   bool    `json:"allowed"`
	Remaining float64 `json:"remaining"`
	Wait      float64 `json:"wait_seconds,omitempty"`
	Reset     float64 `json:"reset_seconds"`
	Delay     float64 `json:"delay_seconds,omitempty"`
}

func simJSON(label string, res simulate.Result) simResultJSON {
	out := simResultJSON{Policy: label, Decision: simDecisionJSON{
		Allowed: res.Status == 0, Status: res.Status, Rule: res.Rule, Headers: res.Headers,
		Body: res.Body, UpstreamHeaders: res.Upstream, DelayMS: res.DelayMS,
	}, Policies: []simPolicyJSON{}}
	if res.GRPCStatus != 0 {
		out.Decision.GRPCStatus = policy.GRPCCodeName(res.GRPCStatus)
	}
	if out.Decision.Headers == nil {
		out.Decision.Headers = [][2]string{}
	}
	for _, p := range res.Policies {
		pj := simPolicyJSON{Name: p.Name, Rules: []simRuleJSON{}}
		if p.Applied >= 0 {
			pj.Applied = p.Rules[p.Applied].Name
		}
		for _, r := range p.Rules {
			rj := simRuleJSON{Name: r.Name, Mode: string(r.Mode), Algorithm: r.Algorithm, Action: r.Action, Applies: r.Applies, Why: r.Why, Global: r.Global,
				Overridden: r.Overridden, ChargedLater: r.ChargedLater, Spared: r.Spared}
			if r.Applies && r.Action == policy.ActionLimit {
				level := r.Level
				rj.Identity, rj.Cost, rj.StateKnown, rj.Level = r.Identity, r.Cost, r.Known, &level
				d := r.Decision
				rj.Decision = &simRuleDecis{Allowed: d.Allowed, Remaining: d.Remaining, Wait: d.Wait, Reset: d.Reset, Delay: d.Delay}
				if c := r.Response; c != nil {
					rj.Response = &simChargeJSON{Charged: c.Charged, Cost: c.Cost, Why: c.Why, Remaining: c.After}
				}
			}
			pj.Rules = append(pj.Rules, rj)
		}
		out.Policies = append(out.Policies, pj)
	}
	return out
}

type simulateBody struct {
	Request *simRequest     `json:"request"`
	Policy  json.RawMessage `json:"policy"`
	Version *int64          `json:"version"`
}

func (s *server) apiSimulate(w http.ResponseWriter, r *http.Request) error {
	var b simulateBody
	if err := s.decodeJSON(w, r, &b, []string{"request", "policy", "version"}); err != nil {
		return err
	}
	if b.Request == nil {
		return &policies.InputError{Field: "request", Message: "required: the request to simulate (method, path, host, headers, query, client_address, jwt or claims)"}
	}
	req, err := b.Request.build()
	if err != nil {
		return err
	}
	var draft []byte
	if len(b.Policy) > 0 && string(b.Policy) != "null" {
		draft = b.Policy
	}
	sp, err := s.loadSimPolicy(r.Context(), draft, b.Version)
	if err != nil {
		return err
	}
	now := s.now()
	res := simulate.Run(sp.cfg, req, simulate.Options{Now: limiter.Seconds(now.UnixNano()), Lookup: s.telemetryLookup(now)})
	writeJSON(w, http.StatusOK, simJSON(sp.label, res))
	return nil
}
