package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/istio"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
)

// apiErr is an error with its HTTP status and JSON body fields.
type apiErr struct {
	status int
	msg    string
	extra  map[string]any
}

func (e *apiErr) Error() string { return e.msg }

// api wraps a JSON handler: the address's throttle, bearer
// authentication (the admin token or an API token), the role the route
// needs, then errors mapped to statuses with a JSON body {"error": "..."}.
func (s *server) api(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearer(r)
		addr := s.clientAddr(r)
		if ok {
			if d := s.Throttle.Check(addr, ""); d.Refuse {
				writeThrottled(w, d)
				return
			}
		}
		p, err := s.Auth.Authenticate(r.Context(), tok)
		if err != nil && !errors.Is(err, auth.ErrBadToken) {
			s.writeAPIError(w, r, err)
			return
		}
		if err != nil {
			msg := "authentication required: send the admin token or an API token as \"Authorization: Bearer <token>\""
			challenge := `Bearer realm="sluice-admin"`
			if ok {
				msg = "the bearer token is neither the admin token nor an API token in force"
				challenge += `, error="invalid_token"`
				s.failed(r, "bearer", addr, "", auth.Principal{Name: "(bad bearer token)"})
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
			return
		}
		if need := requiredRole(r.Method, r.URL.Path); !p.Role.Allows(need) {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": forbiddenMessage(p, need)})
			return
		}
		if err := h(w, withPrincipal(r, p)); err != nil {
			s.writeAPIError(w, r, err)
		}
	})
}

// writeThrottled answers a refused attempt: 429 with Retry-After.
func writeThrottled(w http.ResponseWriter, d auth.Decision) {
	w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(d)))
	writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": fmt.Sprintf(
		"too many failed attempts from your address; try again in %d s", retrySeconds(d))})
}

func retrySeconds(d auth.Decision) int { return max(1, int((d.RetryAfter+time.Second-1)/time.Second)) }

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", true // present but not a bearer token: invalid
	}
	return strings.TrimSpace(tok), true
}

func (s *server) writeAPIError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		ae  *apiErr
		ve  *policies.ValidationError
		ce  *policies.ConflictError
		ie  *policies.InputError
		nfe *policies.NotFoundError
		se  *policies.ScopeError
	)
	if te := testsError(err); te != err {
		err = te // the tests' refusals, as API errors
	}
	if status, body, ok := s.reviewError(r, err); ok {
		writeJSON(w, status, body)
		return
	}
	var me *policies.ManagedError
	var ue *policies.UnavailableError
	switch {
	case errors.As(err, &ue):
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": ue.Error()})
	case errors.As(err, &se):
		writeJSON(w, http.StatusForbidden, map[string]any{"error": se.Error(), "changes": se.Changes, "scope": se.Scope.String()})
	case errors.As(err, &me):
		writeJSON(w, http.StatusConflict, map[string]any{"error": me.Error(), "follows": me.Path})
	case errors.As(err, &ae):
		body := map[string]any{"error": ae.msg}
		for k, v := range ae.extra {
			body[k] = v
		}
		writeJSON(w, ae.status, body)
	case errors.As(err, &ve):
		n := len(ve.Errors)
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"error":  fmt.Sprintf("invalid configuration: %d problem%s; nothing was saved", n, plural(n)),
			"errors": fieldErrors(ve.Errors),
		})
	case errors.As(err, &ce):
		writeJSON(w, http.StatusConflict, map[string]any{
			"error": ce.Error(), "base_version": ce.Base, "current_version": ce.Current,
		})
	case errors.As(err, &ie):
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": ie.Error(), "field": ie.Field})
	case errors.As(err, &nfe):
		writeJSON(w, http.StatusNotFound, map[string]any{"error": nfe.Error()})
	case isTooLarge(err):
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": s.tooLargeMessage()})
	default:
		s.log.Error("API request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "internal error; see the admin's log"})
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

type fieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func fieldErrors(es policy.Errors) []fieldError {
	out := make([]fieldError, len(es))
	for i, e := range es {
		out[i] = fieldError{Path: e.Path, Message: e.Message}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"error":"internal error encoding the response"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// versionJSON is a version in API responses.
type versionJSON struct {
	Version    int64           `json:"version"`
	Parent     int64           `json:"parent"`
	RollbackOf int64           `json:"rollback_of,omitempty"`
	Author     string          `json:"author"`
	Message    string          `json:"message"`
	Created    time.Time       `json:"created"`
	Policy     json.RawMessage `json:"policy,omitempty"`
	// Follows is, on the current version, the file the policy follows.
	Follows *followsJSON `json:"follows,omitempty"`
}

// followsJSON is the last look at the file the policy follows.
type followsJSON struct {
	File    string    `json:"file"`
	Tests   string    `json:"tests,omitempty"`
	SHA256  string    `json:"sha256,omitempty"`
	Applied bool      `json:"applied"` // the current version is the file's content
	Error   string    `json:"error,omitempty"`
	Checked time.Time `json:"checked"`
}

func toJSON(v policies.Version, withPolicy bool) versionJSON {
	out := versionJSON{Version: v.Number, Parent: v.Parent, RollbackOf: v.RollbackOf, Author: v.Author, Message: v.Message, Created: v.Created.UTC()}
	if withPolicy {
		out.Policy = json.RawMessage(v.JSON)
	}
	return out
}

func (s *server) apiCurrent(w http.ResponseWriter, r *http.Request) error {
	v, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(v.Number, 10)))
	out := toJSON(v, true)
	if st, ok := s.Policies.FileStatus(); ok {
		out.Follows = &followsJSON{File: st.Policy, Tests: st.Tests, SHA256: st.SHA256, Applied: st.Err == "" && st.Version == v.Number,
			Error: st.Err, Checked: st.Checked.UTC()}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) apiGet(w http.ResponseWriter, r *http.Request) error {
	n, err := parseVersion(r.PathValue("n"), "version")
	if err != nil {
		return err
	}
	v, err := s.Policies.Get(r.Context(), n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toJSON(v, true))
	return nil
}

func (s *server) apiList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var before int64
	limit := 0
	if v := q.Get("before"); v != "" {
		n, err := parseVersion(v, "before")
		if err != nil {
			return err
		}
		before = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return &policies.InputError{Field: "limit", Message: fmt.Sprintf("%q is not a number", v)}
		}
		limit = n
	}
	p, err := s.Policies.List(r.Context(), before, limit)
	if err != nil {
		return err
	}
	out := struct {
		Versions   []versionJSON `json:"versions"`
		NextBefore int64         `json:"next_before,omitempty"`
	}{Versions: []versionJSON{}, NextBefore: p.NextBefore}
	for _, v := range p.Versions {
		out.Versions = append(out.Versions, toJSON(v, false))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// apiDiff: ?from=&to=; to defaults to the current version, from to to's parent.
func (s *server) apiDiff(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var to policies.Version
	var err error
	if v := q.Get("to"); v != "" {
		n, err := parseVersion(v, "to")
		if err != nil {
			return err
		}
		to, err = s.Policies.Get(r.Context(), n)
		if err != nil {
			return err
		}
	} else if to, err = s.Policies.Current(r.Context()); err != nil {
		return err
	}
	from := to.Parent
	if v := q.Get("from"); v != "" {
		if from, err = parseVersion(v, "from"); err != nil {
			return err
		}
	}
	d, err := s.Policies.Diff(r.Context(), from, to.Number)
	if err != nil {
		return err
	}
	type line struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
		Old  int    `json:"old,omitempty"`
		New  int    `json:"new,omitempty"`
	}
	type hunk struct {
		Header string `json:"header"`
		Lines  []line `json:"lines"`
	}
	out := struct {
		From    int64  `json:"from"`
		To      int64  `json:"to"`
		Unified string `json:"unified"`
		Hunks   []hunk `json:"hunks"`
	}{From: from, To: to.Number, Unified: d.Unified(), Hunks: []hunk{}}
	for _, h := range d.Hunks {
		hj := hunk{Header: h.Header()}
		for _, l := range h.Lines {
			hj.Lines = append(hj.Lines, line{Kind: string(rune(l.Kind)), Text: l.Text, Old: l.OldLine, New: l.NewLine})
		}
		out.Hunks = append(out.Hunks, hj)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// decodeJSON reads a JSON request body into dst strictly: JSON content
// type, one object, no unknown fields, within the size limit. Errors name
// the offending field.
func (s *server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any, fields []string) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return &apiErr{status: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("Content-Type %q is not supported; send application/json", ct)}
		}
	} else {
		return &apiErr{status: http.StatusUnsupportedMediaType, msg: "missing Content-Type; send the body as application/json"}
	}
	s.limitBody(w, r)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		return nil
	}
	if isTooLarge(err) {
		return err
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF):
		msg = "the body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "the body ends in the middle of the JSON"
	case errors.As(err, &se):
		msg = fmt.Sprintf("the body is not valid JSON (at byte offset %d): %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			msg = "the body must be a JSON object, got " + te.Value
		} else {
			return &policies.InputError{Field: te.Field, Message: fmt.Sprintf("must be %s, got %s", typeName(te.Type.String()), te.Value)}
		}
	case strings.HasPrefix(msg, "json: unknown field "):
		name := strings.TrimPrefix(msg, "json: unknown field ")
		msg = fmt.Sprintf("unknown field %s; allowed fields: %s", name, strings.Join(fields, ", "))
	}
	return &apiErr{status: http.StatusBadRequest, msg: "invalid request body: " + msg}
}

func typeName(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case goType == "string" || goType == "*string":
		return "a string"
	case goType == "bool" || goType == "*bool":
		return "true or false"
	}
	return "a JSON " + goType
}

type saveBody struct {
	BaseVersion *int64          `json:"base_version"`
	Policy      json.RawMessage `json:"policy"`
	Message     string          `json:"message"`
	Author      string          `json:"author"`
	SkipTests   bool            `json:"skip_tests"`
	Tests       *string         `json:"tests"`
}

var saveFields = []string{"base_version", "policy", "message", "author", "skip_tests", "tests"}

func (s *server) apiSave(w http.ResponseWriter, r *http.Request) error {
	var b saveBody
	if err := s.decodeJSON(w, r, &b, saveFields); err != nil {
		return err
	}
	if b.BaseVersion == nil {
		return &policies.InputError{Field: "base_version", Message: "required: the version your change is based on (GET /api/v1/policy returns the current one)"}
	}
	if len(b.Policy) == 0 || string(b.Policy) == "null" {
		return &policies.InputError{Field: "policy", Message: "required: the configuration, a JSON object"}
	}
	if p := principal(r); b.Tests != nil && scopeOf(p).Restricted() {
		return errScopedTests(p)
	}
	v, err := s.Policies.Save(r.Context(), policies.SaveRequest{Base: *b.BaseVersion, JSON: b.Policy, Author: apiAuthor(r, b.Author), Message: b.Message,
		Scope: scopeOf(principal(r)), SkipTests: b.SkipTests, Tests: b.Tests})
	if err != nil {
		return err
	}
	skipped := b.SkipTests && b.Tests == nil
	s.record(r, store.AuditEntry{Action: ActionSave, Version: v.Number, FromVersion: *b.BaseVersion, Detail: saveDetail(b.Message, skipped)})
	if b.Tests != nil {
		if t, err := s.Policies.Tests(r.Context()); err == nil {
			s.record(r, store.AuditEntry{Action: ActionTestsSave, Version: v.Number, Detail: testsDetail(t) + fmt.Sprintf(", with v%d", v.Number)})
		}
	}
	w.Header().Set("Location", "/api/v1/policy/versions/"+strconv.FormatInt(v.Number, 10))
	writeJSON(w, http.StatusCreated, toJSON(v, true))
	return nil
}

func (s *server) apiValidate(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Policy json.RawMessage `json:"policy"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"policy"}); err != nil {
		return err
	}
	if len(b.Policy) == 0 || string(b.Policy) == "null" {
		return &policies.InputError{Field: "policy", Message: "required: the configuration, a JSON object"}
	}
	norm, warnings, err := policies.Check(b.Policy)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"valid": true, "normalized": json.RawMessage(policy.MaskSecrets(norm)),
		"warnings": warningsJSON(warnings)})
	return nil
}

func (s *server) apiRollback(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		To          *int64 `json:"to"`
		BaseVersion *int64 `json:"base_version"`
		Author      string `json:"author"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"to", "base_version", "author"}); err != nil {
		return err
	}
	if b.To == nil {
		return &policies.InputError{Field: "to", Message: "required: the version to restore"}
	}
	if b.BaseVersion == nil {
		return &policies.InputError{Field: "base_version", Message: "required: the current version you are rolling back from"}
	}
	v, err := s.Policies.Rollback(r.Context(), policies.RollbackRequest{To: *b.To, Base: *b.BaseVersion, Author: apiAuthor(r, b.Author), Scope: scopeOf(principal(r))})
	if err != nil {
		return err
	}
	s.record(r, store.AuditEntry{Action: ActionRollback, Version: v.Number, FromVersion: *b.To, Detail: fmt.Sprintf("restores v%d over v%d", *b.To, *b.BaseVersion)})
	w.Header().Set("Location", "/api/v1/policy/versions/"+strconv.FormatInt(v.Number, 10))
	writeJSON(w, http.StatusCreated, toJSON(v, true))
	return nil
}

func (s *server) apiExport(w http.ResponseWriter, r *http.Request) error {
	v, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	writeExport(w, v)
	return nil
}

func writeExport(w http.ResponseWriter, v policies.Version) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="sluice-policy-v%d.json"`, v.Number))
	w.Header().Set("X-Sluice-Policy-Version", strconv.FormatInt(v.Number, 10))
	io.WriteString(w, v.Pretty())
}

func (s *server) apiSchema(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/schema+json")
	w.Write(policy.JSONSchema())
	return nil
}

// istioManifest is a rendered WasmPlugin in the format asked for.
type istioManifest struct {
	body        []byte
	contentType string
	version     policies.Version
	warnings    []string // what will not work under Istio as it stands
}

// renderIstio renders the WasmPlugin for the current version; the query's
// target (Kind/name, comma-separated) overrides the -istio-selector and
// -istio-target flags.
func (s *server) renderIstio(r *http.Request, format string) (istioManifest, error) {
	if format == "" {
		format = "yaml"
	}
	if format != "yaml" && format != "json" {
		return istioManifest{}, &policies.InputError{Field: "format", Message: fmt.Sprintf("%q is not supported; use yaml or json", format)}
	}
	opts := s.Istio
	if t := r.URL.Query().Get("target"); t != "" {
		targets, err := istio.ParseTargets(t)
		if err != nil {
			return istioManifest{}, &policies.InputError{Field: "target", Message: strings.TrimPrefix(err.Error(), "target: ")}
		}
		// Istio takes targets or a selector: the query's targets replace
		// the -istio-selector.
		opts.Targets, opts.Selector = targets, nil
	}
	v, err := s.Policies.Current(r.Context())
	if err != nil {
		return istioManifest{}, err
	}
	m, err := istio.Render(s.exported(r.Context(), v), v.Number, opts)
	if err != nil {
		return istioManifest{version: v}, err
	}
	out := istioManifest{version: v, warnings: m.Warnings()}
	if format == "json" {
		out.body, out.contentType = m.JSON(), "application/json; charset=utf-8"
		return out, nil
	}
	out.body, err = m.YAML()
	out.contentType = "application/yaml; charset=utf-8"
	return out, err
}

func (s *server) apiIstio(w http.ResponseWriter, r *http.Request) error {
	m, err := s.renderIstio(r, r.URL.Query().Get("format"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", m.contentType)
	w.Write(m.body)
	return nil
}

type nodeJSON struct {
	ID            string    `json:"id"`
	Cluster       string    `json:"cluster"`
	Connected     bool      `json:"connected"`
	LastSeen      time.Time `json:"last_seen"`
	AckedVersion  string    `json:"acked_version"`
	NackedVersion string    `json:"nacked_version,omitempty"`
	NackError     string    `json:"nack_error,omitempty"`
}

func (s *server) nodes() []NodeStatus {
	if s.Nodes == nil {
		return nil
	}
	ns := slices.Clone(s.Nodes.Nodes())
	sort.SliceStable(ns, func(i, j int) bool { return ns[i].ID < ns[j].ID })
	return ns
}

func (s *server) apiNodes(w http.ResponseWriter, r *http.Request) error {
	out := struct {
		XDS            bool       `json:"xds"`
		CurrentVersion int64      `json:"current_version"`
		Published      int64      `json:"published_version"`
		PublishError   string     `json:"publish_error,omitempty"`
		Nodes          []nodeJSON `json:"nodes"`
	}{XDS: s.Nodes != nil, Nodes: []nodeJSON{}}
	if cur, err := s.Policies.Current(r.Context()); err == nil {
		out.CurrentVersion = cur.Number
	}
	ps := s.Policies.LastPublish()
	out.Published = ps.Version
	if ps.Err != nil {
		out.PublishError = ps.Err.Error()
	}
	for _, n := range s.nodes() {
		out.Nodes = append(out.Nodes, nodeJSON{
			ID: n.ID, Cluster: n.Cluster, Connected: n.Connected, LastSeen: n.LastSeen.UTC(),
			AckedVersion: n.AckedVersion, NackedVersion: n.NackedVersion, NackError: n.NackError,
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// warningJSON is a policy warning in API answers.
type warningJSON struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

func warningsJSON(ws []policy.Warning) []warningJSON {
	out := make([]warningJSON, 0, len(ws))
	for _, w := range ws {
		out = append(out, warningJSON{Rule: w.Rule, Message: w.Message})
	}
	return out
}
