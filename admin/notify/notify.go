// Package notify posts the admin's audit events to a webhook: a policy
// saved, rolled back, tried or promoted, an account or token changed, a
// login source locked out. The body is JSON with a "text" line, so a
// Slack or Mattermost incoming webhook shows it as it is, and the event's
// fields for anything else; an HMAC-SHA256 signature lets the receiver
// check where it came from.
//
// Delivery never holds up the change it reports: events wait in a
// bounded queue (dropped, and counted, when it is full), and each is tried
// a few times before it is given up.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/admin/store"
)

// DefaultActions are the audit actions notified unless Options.Actions
// says otherwise: every change, and lockouts; not logins.
var DefaultActions = []string{"policy.", "trial.", "client.", "rule.reset", "user.", "token.", "settings.", "auth.lockout"}

// Options configure a Webhook.
type Options struct {
	URL     string   // http:// or https://
	Secret  string   // signs each body (X-Sluice-Signature); "" sends none
	Actions []string // audit actions to send; one ending in "." is a prefix. Empty: DefaultActions
	Logger  *slog.Logger
	Client  *http.Client // default: a client with a 5 s timeout
	// Queue bounds the events waiting; Attempts and Backoff shape the
	// retries (defaults 1000, 3 and 1 s, doubling).
	Queue    int
	Attempts int
	Backoff  time.Duration
}

// Webhook sends events to one URL. Notify is safe for concurrent use; Run
// delivers them.
type Webhook struct {
	opts    Options
	log     *slog.Logger
	queue   chan store.AuditEntry
	results *prometheus.CounterVec
}

// New checks the options and returns a Webhook. Errors name the flag.
func New(o Options) (*Webhook, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("-notify-url: %q is not an http:// or https:// URL", o.URL)
	}
	if len(o.Actions) == 0 {
		o.Actions = DefaultActions
	}
	for _, a := range o.Actions {
		if strings.TrimSpace(a) == "" || strings.ContainsAny(a, " \t") {
			return nil, fmt.Errorf("-notify-actions: %q is not an audit action or a prefix ending in \".\" (e.g. policy.)", a)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Queue <= 0 {
		o.Queue = 1000
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	w := &Webhook{opts: o, log: o.Logger.With("component", "notify"), queue: make(chan store.AuditEntry, o.Queue),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_notify_events_total",
			Help: "Audit events for the notification webhook, by result: sent (a 2xx answer), failed (every attempt failed), dropped (the queue was full).",
		}, []string{"result"})}
	for _, r := range []string{"sent", "failed", "dropped"} {
		w.results.WithLabelValues(r) // at 0 from the start, for increase()
	}
	return w, nil
}

// Collector returns the webhook's metrics.
func (w *Webhook) Collector() prometheus.Collector { return w.results }

// Wants reports whether action is one the webhook sends.
func (w *Webhook) Wants(action string) bool {
	for _, a := range w.opts.Actions {
		if a == action || strings.HasSuffix(a, ".") && strings.HasPrefix(action, a) {
			return true
		}
	}
	return false
}

// Notify queues e if its action is wanted. It never blocks: with the
// queue full, e is dropped and counted.
func (w *Webhook) Notify(e store.AuditEntry) {
	if !w.Wants(e.Action) {
		return
	}
	select {
	case w.queue <- e:
	default:
		w.results.WithLabelValues("dropped").Inc()
		w.log.Warn("notification queue full; event dropped", "action", e.Action)
	}
}

// Run delivers queued events, one at a time in order, until ctx ends.
func (w *Webhook) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-w.queue:
			w.deliver(ctx, e)
		}
	}
}

func (w *Webhook) deliver(ctx context.Context, e store.AuditEntry) {
	body, err := json.Marshal(Payload(e))
	if err != nil {
		w.results.WithLabelValues("failed").Inc()
		return
	}
	wait := w.opts.Backoff
	for attempt := 1; ; attempt++ {
		err = w.post(ctx, body, e)
		if err == nil {
			w.results.WithLabelValues("sent").Inc()
			return
		}
		if attempt >= w.opts.Attempts || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait *= 2
	}
	w.results.WithLabelValues("failed").Inc()
	w.log.Warn("notification not delivered", "action", e.Action, "attempts", w.opts.Attempts, "err", err)
}

func (w *Webhook) post(ctx context.Context, body []byte, e store.AuditEntry) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.opts.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice-admin")
	req.Header.Set("X-Sluice-Event", e.Action)
	if w.opts.Secret != "" {
		req.Header.Set("X-Sluice-Signature", Sign(w.opts.Secret, body))
	}
	resp, err := w.opts.Client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errors.New("answered " + resp.Status)
	}
	return nil
}

// Sign is the X-Sluice-Signature of body: "sha256=" and the hex HMAC-SHA256
// of the body with the secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Event is the JSON body of a notification.
type Event struct {
	Text        string    `json:"text"` // one line, for chat webhooks
	Action      string    `json:"action"`
	Actor       string    `json:"actor"`
	Target      string    `json:"target,omitempty"`
	Detail      string    `json:"detail,omitempty"`
	Version     int64     `json:"version,omitempty"`
	FromVersion int64     `json:"from_version,omitempty"`
	Remote      string    `json:"remote,omitempty"`
	At          time.Time `json:"at"`
}

// Payload is the notification of e.
func Payload(e store.AuditEntry) Event {
	return Event{Text: Text(e), Action: e.Action, Actor: e.Actor, Target: e.Target, Detail: e.Detail,
		Version: e.Version, FromVersion: e.FromVersion, Remote: e.Remote, At: e.At.UTC()}
}

// Text says what happened in one line.
func Text(e store.AuditEntry) string {
	var what string
	switch e.Action {
	case "policy.save":
		what = fmt.Sprintf("saved policy v%d (on v%d)", e.Version, e.FromVersion)
	case "policy.rollback":
		what = fmt.Sprintf("rolled the policy back (v%d)", e.Version)
	case "trial.start":
		what = fmt.Sprintf("started %s over v%d", e.Target, e.FromVersion)
	case "trial.end":
		what = "ended " + e.Target
	case "trial.promote":
		what = fmt.Sprintf("promoted %s as policy v%d", e.Target, e.Version)
	case "policy.tests":
		what = "changed the policy tests"
	case "policy.propose":
		what = fmt.Sprintf("proposed %s on v%d for review", e.Target, e.FromVersion)
	case "policy.approve":
		what = fmt.Sprintf("approved %s as policy v%d", e.Target, e.Version)
	case "policy.reject":
		what = "rejected " + e.Target
	case "policy.withdraw":
		what = "withdrew " + e.Target
	case "client.reset":
		what = "reset a client's state under " + e.Target
	case "rule.reset":
		what = "reset every identity's state under " + e.Target
	default:
		what = e.Action
		if e.Target != "" {
			what += " " + e.Target
		}
	}
	line := "Sluice: " + e.Actor + " " + what
	if e.Detail != "" {
		line += ": " + e.Detail
	}
	return line
}

// AuditLog is the store's audit log.
type AuditLog interface {
	AppendAudit(ctx context.Context, e store.AuditEntry) error
	ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error)
}

// Log is an AuditLog that also notifies every entry it appends.
type Log struct {
	AuditLog
	Hook *Webhook
}

// AppendAudit appends e, then queues its notification.
func (l Log) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	if err := l.AuditLog.AppendAudit(ctx, e); err != nil {
		return err
	}
	l.Hook.Notify(e)
	return nil
}
