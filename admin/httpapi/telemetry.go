package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/telemetry"
)

// Telemetry wires the telemetry into the handler (Config.Telemetry). State
// and Tokens are required; the rest is optional.
type Telemetry struct {
	State   *telemetry.State
	Tokens  TelemetryTokens
	Metrics TelemetryMetrics // counts reports by result (nil: not counted)
	// MetricsHandler, if set, is served at GET /metrics on this listener,
	// behind the admin token. main leaves it nil when the metrics have
	// their own listener (-metrics-listen), where they need no token.
	MetricsHandler http.Handler
	// MetricsURL is where Prometheus scrapes, shown on the telemetry page
	// ("" when the metrics are off; a path is taken relative to this admin).
	MetricsURL string
	// TokenEnv is the VM environment variable that carries the telemetry
	// token to the plugins (the admin's -telemetry-token-env; "" for off),
	// shown in the policy block the telemetry page suggests.
	TokenEnv string
	// Done, when closed, ends the dashboard's event streams (main closes it
	// when the server shuts down, so Shutdown need not wait for them).
	Done <-chan struct{}
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// TelemetryTokens checks and rotates the telemetry token
// (admin/telemetry.Tokens implements it).
type TelemetryTokens interface {
	Check(token string) bool
	Rotate(ctx context.Context, grace time.Duration) (string, error)
	Info() telemetry.TokenInfo
}

// TelemetryMetrics counts the reports (admin/telemetry.Metrics implements it).
type TelemetryMetrics interface {
	Report(result string)
	ObserveIngest(d time.Duration)
}

func (s *server) now() time.Time {
	if s.Telemetry != nil && s.Telemetry.Now != nil {
		return s.Telemetry.Now()
	}
	return time.Now()
}

func (s *server) countReport(result string) {
	if s.Telemetry.Metrics != nil {
		s.Telemetry.Metrics.Report(result)
	}
}

// registerTelemetry adds the telemetry routes. The ingestion endpoint takes
// the telemetry token, the others the admin token or a session.
func (s *server) registerTelemetry(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/v1/telemetry", s.telemetryIngest)
	mux.Handle("GET /api/v1/telemetry", s.api(s.apiTelemetry))
	mux.Handle("GET /api/v1/telemetry/token", s.api(s.apiTelemetryToken))
	mux.Handle("POST /api/v1/telemetry/token/rotate", s.api(s.apiTelemetryRotate))
	if h := s.Telemetry.MetricsHandler; h != nil {
		mux.Handle("GET /metrics", s.api(func(w http.ResponseWriter, r *http.Request) error {
			h.ServeHTTP(w, r)
			return nil
		}))
	}
	mux.Handle("GET /telemetry", s.page(s.telemetryPage))
	mux.Handle("POST /telemetry/token", s.page(s.telemetryRotateSubmit))
}

var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// telemetryIngest is POST /api/v1/telemetry: one report from one VM of a
// plugin. In order: 401 without the telemetry token, 415 unless the body
// is application/json, 413 over 1 MiB, 400 with every problem if the
// report is invalid (nothing stored), else 204 (a duplicate is a 204 too).
func (s *server) telemetryIngest(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tok, ok := bearer(r)
	if !ok || !s.Telemetry.Tokens.Check(tok) {
		s.countReport(telemetry.ResultUnauthorized)
		msg := "authentication required: send the telemetry token as \"Authorization: Bearer <token>\""
		challenge := `Bearer realm="sluice-telemetry"`
		if ok {
			msg = "the bearer token is not the telemetry token"
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
		return
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		s.countReport(telemetry.ResultBadMedia)
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": fmt.Sprintf("Content-Type %q is not supported; send application/json", r.Header.Get("Content-Type"))})
		return
	}
	tooLarge := func() {
		s.countReport(telemetry.ResultTooLarge)
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("report too large: the limit is %d bytes; lower telemetry.top_n", telemetry.MaxBodyBytes)})
	}
	if r.ContentLength > telemetry.MaxBodyBytes {
		tooLarge()
		return
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 2*telemetry.MaxBodyBytes {
			bodyPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, telemetry.MaxBodyBytes)); err != nil {
		if isTooLarge(err) {
			tooLarge()
			return
		}
		s.countReport(telemetry.ResultInvalid)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "reading the report failed: " + err.Error(),
			"errors": []telemetry.FieldError{{Message: "the body could not be read: " + err.Error()}}})
		return
	}
	rep, err := telemetry.Decode(buf.Bytes())
	if err != nil {
		var es telemetry.Errors
		if !errors.As(err, &es) {
			es = telemetry.Errors{{Message: err.Error()}}
		}
		s.Telemetry.State.RecordRejected(reportNode(buf.Bytes()))
		s.countReport(telemetry.ResultInvalid)
		s.log.Debug("refused a telemetry report", "remote", r.RemoteAddr, "problems", len(es), "first", es[0].Error())
		writeJSON(w, http.StatusBadRequest, map[string]any{
			"error":  fmt.Sprintf("invalid telemetry report: %d problem%s; nothing was stored", len(es), plural(len(es))),
			"errors": es,
		})
		return
	}
	switch s.Telemetry.State.Ingest(rep, s.now()) {
	case telemetry.Duplicate:
		s.countReport(telemetry.ResultDuplicate)
	case telemetry.Refused:
		s.countReport(telemetry.ResultRefused)
	default:
		s.countReport(telemetry.ResultAccepted)
	}
	if s.Telemetry.Metrics != nil {
		s.Telemetry.Metrics.ObserveIngest(time.Since(start))
	}
	w.WriteHeader(http.StatusNoContent)
}

// reportNode reads the node of a refused report, if it has a readable one,
// to charge the refusal to that node.
func reportNode(body []byte) string {
	var v struct {
		Node string `json:"node"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.Node) > telemetry.MaxNodeLen {
		return ""
	}
	return v.Node
}

// overviewOptions reads ?window= (60, 300, 900 seconds or 1m, 5m, 15m) and
// ?top=.
func overviewOptions(r *http.Request) (telemetry.OverviewOptions, string, error) {
	var o telemetry.OverviewOptions
	w, label, err := parseWindow(r.URL.Query().Get("window"))
	if err != nil {
		return o, "", err
	}
	o.Window = w
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return o, "", inputErr("top", fmt.Sprintf("%q is not a number from 1 to 1000", v))
		}
		o.TopN = n
	}
	return o, label, nil
}

// The chart spans offered.
var windows = []struct {
	label string
	d     time.Duration
}{{"1m", time.Minute}, {"5m", 5 * time.Minute}, {"15m", 15 * time.Minute}}

const defaultWindow = "5m"

func parseWindow(v string) (time.Duration, string, error) {
	if v == "" {
		v = defaultWindow
	}
	for _, w := range windows {
		if v == w.label || v == strconv.Itoa(int(w.d/time.Second)) {
			return w.d, w.label, nil
		}
	}
	return 0, "", inputErr("window", fmt.Sprintf("%q is not one of 1m, 5m, 15m", v))
}

// apiTelemetry is GET /api/v1/telemetry: the overview as JSON, with
// ?q= the key search ("search": {"query", "total", "keys"}).
func (s *server) apiTelemetry(w http.ResponseWriter, r *http.Request) error {
	o, _, err := overviewOptions(r)
	if err != nil {
		return err
	}
	now := s.now()
	ov := s.Telemetry.State.Overview(now, o)
	out := struct {
		*telemetry.Overview
		Search *searchJSON `json:"search,omitempty"`
	}{Overview: ov}
	if q := telemetry.CleanQuery(r.URL.Query().Get("q")); q != "" {
		keys, total := s.Telemetry.State.Search(now, q, max(o.TopN, 50))
		if keys == nil {
			keys = []telemetry.KeyView{}
		}
		out.Search = &searchJSON{Query: q, Total: total, Keys: keys}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type searchJSON struct {
	Query string              `json:"query"`
	Total int                 `json:"total"`
	Keys  []telemetry.KeyView `json:"keys"`
}

func (s *server) apiTelemetryToken(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.Telemetry.Tokens.Info())
	return nil
}

// apiTelemetryRotate is POST /api/v1/telemetry/token/rotate
// {"grace_seconds": 600}: a new token, returned this once.
func (s *server) apiTelemetryRotate(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		GraceSeconds *int64 `json:"grace_seconds"`
	}
	if r.ContentLength != 0 {
		if err := s.decodeJSON(w, r, &b, []string{"grace_seconds"}); err != nil {
			return err
		}
	}
	grace := telemetry.DefaultGrace
	if b.GraceSeconds != nil {
		if *b.GraceSeconds < 0 || *b.GraceSeconds > int64(telemetry.MaxGrace/time.Second) {
			return inputErr("grace_seconds", fmt.Sprintf("%d is out of range: 0 to %d", *b.GraceSeconds, int64(telemetry.MaxGrace/time.Second)))
		}
		grace = time.Duration(*b.GraceSeconds) * time.Second
	}
	tok, err := s.Telemetry.Tokens.Rotate(r.Context(), grace)
	if errors.Is(err, telemetry.ErrFixedToken) {
		return &apiErr{status: http.StatusConflict, msg: err.Error()}
	}
	if err != nil {
		return err
	}
	s.log.Info("rotated the telemetry token", "grace", grace)
	s.record(r, store.AuditEntry{Action: ActionTelemetryRotate, Detail: "grace " + grace.String()})
	info := s.Telemetry.Tokens.Info()
	out := map[string]any{"token": tok, "hint": info.Hint}
	if !info.PreviousValidUntil.IsZero() { // without grace the previous token stops at once: as GET .../token says
		out["previous_valid_until"] = info.PreviousValidUntil
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func inputErr(field, msg string) error { return &policies.InputError{Field: field, Message: msg} }
