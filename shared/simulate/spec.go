package simulate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/sluice-rl/sluice/shared/request"
)

// A simulated request as people write it: in the admin's API
// (POST /api/v1/policy/simulate), on its policy page and in policy test
// files. RequestSpec.Build checks it as a proxy would and turns it into the
// Request the filter would see; every refusal is a *FieldError naming
// the field.

// FieldError is a refused field of a RequestSpec: Field is its path
// inside the request ("headers.x-api-key", "response.status").
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldError(field, msg string) error { return &FieldError{Field: field, Message: msg} }

// Limits on a simulated request: what a proxy would accept, not more.
const (
	maxSpecHeaders     = 100
	maxSpecHeaderValue = 8 << 10
	maxSpecHeaderBytes = 60 << 10 // Envoy's default max_request_headers_kb
	maxSpecPath        = 8 << 10
	maxSpecPeer        = 2 << 10
	maxSpecRoute       = 1 << 10
	maxSpecMetadata    = 16 << 10
)

// RequestSpec is a simulated request as people write it (JSON names).
type RequestSpec struct {
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
	// Cluster is the upstream cluster the request's route sends it to,
	// for the cluster source ("" for none).
	Cluster string `json:"cluster"`
	// Connection is the downstream connection's number, for the
	// connection source ("" for none).
	Connection ConnectionSpec `json:"connection"`
	// Metadata is the request's Envoy dynamic metadata, for metadata:
	// sources: an object of namespaces, each an object (specMetadata).
	Metadata json.RawMessage `json:"metadata"`
	// JWT is a bearer token ("Bearer " optional); Claims a JSON object
	// sent as the payload of an unsigned token (the filter never checks
	// signatures). At most one of them.
	JWT    string          `json:"jwt"`
	Claims json.RawMessage `json:"claims"`
	// Response is a sample of the upstream's answer (optional).
	Response *ResponseSpec `json:"response"`
}

// ConnectionSpec is a connection's number as people write it: a JSON
// number or a string of digits ("" or null: none). Build checks it.
type ConnectionSpec string

// UnmarshalJSON keeps a string's text, and any other value's JSON as it is
// written, so that Build refuses what is not a connection's number with
// the field's name.
func (c *ConnectionSpec) UnmarshalJSON(b []byte) error {
	var s string
	switch {
	case string(b) == "null":
		*c = ""
	case json.Unmarshal(b, &s) == nil:
		*c = ConnectionSpec(s)
	default:
		*c = ConnectionSpec(b)
	}
	return nil
}

// number is the connection's number in decimal as the filter writes it
// (no leading zeros), "" for none.
func (c ConnectionSpec) number() (string, error) {
	v := strings.TrimSpace(string(c))
	if v == "" {
		return "", nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return "", fieldError("connection", fmt.Sprintf("%q is not a connection's number: a whole number from 0 to %d", shortText(v), uint64(math.MaxUint64)))
	}
	return strconv.FormatUint(n, 10), nil
}

// specText checks a text field read from an Envoy property: trimmed, at
// most max bytes, no rune that bad refuses (why says what is wrong).
func specText(field, v string, max int, bad func(rune) bool, why string) (string, error) {
	v = strings.TrimSpace(v)
	switch {
	case len(v) > max:
		return "", fieldError(field, fmt.Sprintf("is %d bytes long; at most %d are allowed here", len(v), max))
	case strings.IndexFunc(v, bad) >= 0:
		return "", fieldError(field, fmt.Sprintf("%q %s", shortText(v), why))
	}
	return v, nil
}

// notURIByte refuses what a URI never holds: spaces, controls, non-ASCII.
func notURIByte(r rune) bool { return r < 0x21 || r > 0x7e }

// Build checks the request and turns it into what the filter would see.
// Every refusal names its field.
func (b RequestSpec) Build() (Request, error) {
	req := Request{Method: strings.TrimSpace(b.Method), Path: b.Path, Host: strings.TrimSpace(b.Host), Headers: map[string]string{}}
	if req.Method == "" {
		req.Method = "GET"
	}
	if !isToken(req.Method) || len(req.Method) > 32 {
		return req, fieldError("method", fmt.Sprintf("%q is not an HTTP method", shortText(req.Method)))
	}
	if req.Path == "" {
		req.Path = "/"
	}
	if len(req.Path) > maxSpecPath {
		return req, fieldError("path", fmt.Sprintf("%d bytes; the limit is %d", len(req.Path), maxSpecPath))
	}
	if req.Path[0] != '/' || strings.ContainsAny(req.Path, " \r\n\t\x00") {
		return req, fieldError("path", fmt.Sprintf("%q must start with / and contain no spaces or control characters", shortText(req.Path)))
	}
	if len(b.Query) > 0 {
		names := sortedKeys(b.Query)
		sep := "?"
		if strings.Contains(req.Path, "?") {
			sep = "&"
		}
		for _, n := range names {
			if n == "" {
				return req, fieldError("query", "a parameter name is empty")
			}
			req.Path += sep + queryEscape(n) + "=" + queryEscape(b.Query[n])
			sep = "&"
		}
		if len(req.Path) > maxSpecPath {
			return req, fieldError("query", fmt.Sprintf("the path with its query is %d bytes; the limit is %d", len(req.Path), maxSpecPath))
		}
	}
	if req.Host == "" {
		req.Host = "example.com"
	}
	if len(req.Host) > 255 || strings.ContainsAny(req.Host, " /\r\n\t\x00") {
		return req, fieldError("host", fmt.Sprintf("%q is not a host name", shortText(req.Host)))
	}
	if err := specHeaders("headers", b.Headers, req.Headers); err != nil {
		return req, err
	}
	if b.ClientAddress == "" {
		b.ClientAddress = "192.0.2.1"
	}
	addr := strings.TrimSpace(b.ClientAddress)
	if _, err := netip.ParseAddrPort(addr); err != nil {
		if _, err := netip.ParseAddr(addr); err != nil {
			return req, fieldError("client_address", fmt.Sprintf("%q is not an IP address (with or without a port)", shortText(addr)))
		}
	}
	req.ClientAddress = addr
	var err error
	if req.PeerPrincipal, err = specText("peer_principal", b.PeerPrincipal, maxSpecPeer, notURIByte,
		"is not a URI: it has a space, a control character or a byte outside ASCII"); err != nil {
		return req, err
	}
	if req.Route, err = specText("route", b.Route, maxSpecRoute, unicode.IsControl, "contains a control character"); err != nil {
		return req, err
	}
	if req.Cluster, err = specText("cluster", b.Cluster, maxSpecRoute, unicode.IsControl, "contains a control character"); err != nil {
		return req, err
	}
	if req.Connection, err = b.Connection.number(); err != nil {
		return req, err
	}
	if req.Metadata, err = specMetadata(b.Metadata); err != nil {
		return req, err
	}
	hasClaims := len(b.Claims) > 0 && string(b.Claims) != "null"
	if b.JWT != "" && hasClaims {
		return req, fieldError("jwt", "give a token or claims, not both")
	}
	if b.JWT != "" {
		tok := strings.TrimSpace(b.JWT)
		if len(tok) < 7 || !strings.EqualFold(tok[:7], "bearer ") {
			tok = "Bearer " + tok
		}
		var c request.Claims
		if !request.ParseJWT(tok, &c) {
			return req, fieldError("jwt", fmt.Sprintf("not a JWT the filter can read: it needs three base64url segments whose middle one is a JSON object, at most %d bytes", request.MaxJWT))
		}
		req.Headers["authorization"] = tok
	}
	if hasClaims {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b.Claims, &obj); err != nil || obj == nil {
			return req, fieldError("claims", "must be a JSON object of claims")
		}
		enc := base64.RawURLEncoding.EncodeToString
		tok := "Bearer " + enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(b.Claims) + ".unsigned"
		var c request.Claims
		if !request.ParseJWT(tok, &c) {
			return req, fieldError("claims", fmt.Sprintf("too large for a token: at most %d bytes once encoded", request.MaxJWT))
		}
		req.Headers["authorization"] = tok
	}
	if b.Response != nil {
		resp, err := b.Response.Build()
		if err != nil {
			return req, err
		}
		req.Response = &resp
	}
	return req, nil
}

// specHeaders checks a header map given as field and puts it, names
// lower-cased, into out.
func specHeaders(field string, in, out map[string]string) error {
	if len(in) > maxSpecHeaders {
		return fieldError(field, fmt.Sprintf("%d headers; the limit is %d", len(in), maxSpecHeaders))
	}
	total := 0
	for _, n := range sortedKeys(in) {
		v := in[n]
		name := strings.ToLower(strings.TrimSpace(n))
		at := field + "." + shortText(n)
		if name == "" || !isToken(name) {
			return fieldError(at, "not a valid header name")
		}
		if len(v) > maxSpecHeaderValue {
			return fieldError(at, fmt.Sprintf("the value is %d bytes; the limit is %d", len(v), maxSpecHeaderValue))
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fieldError(at, "the value contains a line break or NUL")
		}
		total += len(name) + len(v)
		if total > maxSpecHeaderBytes {
			return fieldError(field, fmt.Sprintf("the headers exceed %d bytes in all (Envoy's default limit)", maxSpecHeaderBytes))
		}
		out[name] = v
	}
	return nil
}

// ResponseSpec is a sample of the upstream's answer: the rules whose cost
// comes from the response are charged for it.
type ResponseSpec struct {
	Status   int               `json:"status"`
	Headers  map[string]string `json:"headers"`
	Trailers map[string]string `json:"trailers"`
	Body     string            `json:"body"`
}

// maxSpecBody bounds a sample response's body.
const maxSpecBody = 48 << 10 // within the API's 64 KiB request limit

func (b ResponseSpec) Build() (Response, error) {
	resp := Response{Status: b.Status, Headers: map[string]string{}, Trailers: map[string]string{}, Body: []byte(b.Body)}
	if resp.Status == 0 {
		resp.Status = 200
	}
	if resp.Status < 100 || resp.Status > 599 {
		return resp, fieldError("response.status", fmt.Sprintf("%d is not an HTTP status (100 to 599)", b.Status))
	}
	if err := specHeaders("response.headers", b.Headers, resp.Headers); err != nil {
		return resp, err
	}
	if err := specHeaders("response.trailers", b.Trailers, resp.Trailers); err != nil {
		return resp, err
	}
	if len(b.Body) > maxSpecBody {
		return resp, fieldError("response.body", fmt.Sprintf("is %d bytes; at most %d are simulated", len(b.Body), maxSpecBody))
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

// specMetadata reads a simulated request's Envoy dynamic metadata: a JSON
// object whose keys are namespaces (the filters' names) and whose values
// are objects, as Envoy's filter_metadata holds them. Absent or null: none.
func specMetadata(raw json.RawMessage) (map[string]map[string]any, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	if len(raw) > maxSpecMetadata {
		return nil, fieldError("metadata", fmt.Sprintf("is %d bytes; at most %d are allowed here", len(raw), maxSpecMetadata))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, fieldError("metadata", `must be a JSON object of namespaces, e.g. {"envoy.filters.http.jwt_authn": {"jwt_payload": {"sub": "alice"}}}`)
	}
	out := make(map[string]map[string]any, len(top))
	for _, ns := range sortedKeys(top) {
		var st map[string]any
		if err := json.Unmarshal(top[ns], &st); err != nil || st == nil {
			return nil, fieldError("metadata."+shortText(ns), "must be a JSON object: the metadata that filter writes")
		}
		out[ns] = st
	}
	return out, nil
}
