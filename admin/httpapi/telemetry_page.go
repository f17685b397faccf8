package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/web"
)

// telemetryPage is GET /telemetry: the token, the plugin configuration
// block, the ingestion counters, Prometheus.
func (s *server) telemetryPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	s.render(w, r, http.StatusOK, web.Telemetry(s.telemetryView(r, sess, "")))
	return nil
}

// telemetryRotateSubmit is POST /telemetry/token: rotate, and show the new
// token this once (rendered, not redirected: it never sits in a URL).
func (s *server) telemetryRotateSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	if s.Telemetry == nil {
		http.NotFound(w, r)
		return nil
	}
	grace := time.Duration(0)
	if r.PostForm.Get("grace") != "" {
		grace = telemetry.DefaultGrace
	}
	tok, err := s.Telemetry.Tokens.Rotate(r.Context(), grace)
	if errors.Is(err, telemetry.ErrFixedToken) {
		p := s.telemetryView(r, sess, "")
		p.Flashes = append(p.Flashes, web.Flash{Kind: "error", Text: "Not rotated: " + err.Error()})
		s.render(w, r, http.StatusConflict, web.Telemetry(p))
		return nil
	}
	if err != nil {
		return err
	}
	s.log.Info("rotated the telemetry token", "by", sess.Author, "grace", grace)
	s.record(r, store.AuditEntry{Action: ActionTelemetryRotate, Detail: "grace " + grace.String()})
	p := s.telemetryView(r, sess, tok)
	text := "Rotated. The previous token no longer works: push the new one now."
	if grace > 0 {
		text = fmt.Sprintf("Rotated. The previous token keeps working for %s: save the policy with the new one before then.", grace)
	}
	p.Flashes = append(p.Flashes, web.Flash{Kind: "ok", Text: text})
	s.render(w, r, http.StatusOK, web.Telemetry(p))
	return nil
}

func (s *server) telemetryView(r *http.Request, sess auth.Session, newToken string) web.TelemetryPage {
	p := web.TelemetryPage{Nav: nav(sess, "telemetry"), Enabled: s.Telemetry != nil}
	if s.Telemetry == nil {
		return p
	}
	info := s.Telemetry.Tokens.Info()
	p.Hint, p.Created, p.FromFlag, p.NewToken = info.Hint, timeText(info.Created), info.FromFlag, newToken
	if !info.PreviousValidUntil.IsZero() {
		p.PreviousUntil = timeText(info.PreviousValidUntil)
	}
	base := s.baseURL(r)
	p.IngestURL = base + "/api/v1/telemetry"
	// The suggested block names the token's variable, never the token:
	// the policy is shown, versioned and diffed; the VM environment is not.
	p.TokenEnv = s.Telemetry.TokenEnv
	tokenField := fmt.Sprintf(`"token_env": %q`, p.TokenEnv)
	if p.TokenEnv == "" {
		tokenField = `"token_env": "<the VM environment variable holding the telemetry token>"`
	}
	p.Snippet = fmt.Sprintf(`"telemetry": {
  "cluster": "sluice_admin",
  "authority": %q,
  "path": "/api/v1/telemetry",
  "interval_ms": 1000,
  "top_n": 50,
  "timeout_ms": 500,
  %s
}`, r.Host, tokenField)
	st := s.Telemetry.State.Stats()
	o := s.Telemetry.State.Options()
	p.Facts = []web.Fact{
		{Label: "Reports accepted", Value: count(st.Accepted)},
		{Label: "Duplicates (ignored)", Value: count(st.Duplicates)},
		{Label: "Refused as invalid", Value: count(st.Rejected)},
		{Label: "Nodes", Value: fmt.Sprintf("%d (forgotten after %s without a report)", st.Nodes, o.NodeTTL)},
		{Label: "VMs", Value: count(st.VMs)},
		{Label: "Bucket states", Value: fmt.Sprintf("%s of at most %s (%s evicted)", count(st.Buckets), count(o.MaxBuckets), count(st.BucketsEvicted))},
		{Label: "History", Value: o.History.String() + ", one point per second"},
		{Label: "Memory (nodes, VMs, rules, series)", Value: fmt.Sprintf("%s of %s (-telemetry-max-bytes); refused: %s nodes, %s VMs, %s rules of VMs",
			humanize.IBytes(uint64(st.UsedBytes)), humanize.IBytes(uint64(st.MaxBytes)),
			count(st.Refused[telemetry.RefusedNode]), count(st.Refused[telemetry.RefusedVM]), count(st.Refused[telemetry.RefusedRule]))},
	}
	if u := s.Telemetry.MetricsURL; u != "" {
		if strings.HasPrefix(u, "/") {
			u = base + u
		}
		p.MetricsURL = u
		p.MetricsAuth = s.Telemetry.MetricsHandler != nil
	}
	return p
}

// baseURL is this admin as the browser reached it.
func (s *server) baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || s.SecureCookies {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
