package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/admin/store"
)

// receiver records what the webhook receives and answers with status.
type receiver struct {
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	status  int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.bodies = append(rc.bodies, b)
	rc.headers = append(rc.headers, r.Header.Clone())
	w.WriteHeader(rc.status)
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.bodies)
}

func start(t *testing.T, o Options) *Webhook {
	t.Helper()
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

var save = store.AuditEntry{At: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), Actor: "ann", Action: "policy.save",
	Remote: "10.0.0.7", Detail: "raise the free tier", Version: 12, FromVersion: 11}

// TestWebhookPostsSignedChangesButNotLogins: a saved policy arrives as a
// signed JSON body whose text a chat shows; a login is not sent.
func TestWebhookPostsSignedChangesButNotLogins(t *testing.T) {
	rc := &receiver{status: http.StatusOK}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	w := start(t, Options{URL: srv.URL, Secret: "s3cret"})
	w.Notify(store.AuditEntry{Actor: "ann", Action: "login"})
	w.Notify(save)
	waitFor(t, "the save's notification", func() bool { return testutil.ToFloat64(w.results.WithLabelValues("sent")) == 1 })
	if rc.count() != 1 {
		t.Fatalf("%d notifications, want the save's only", rc.count())
	}
	var got Event
	if err := json.Unmarshal(rc.bodies[0], &got); err != nil {
		t.Fatal(err)
	}
	want := Event{Text: "Sluice: ann saved policy v12 (on v11): raise the free tier", Action: "policy.save", Actor: "ann",
		Detail: "raise the free tier", Version: 12, FromVersion: 11, Remote: "10.0.0.7", At: save.At}
	if got != want {
		t.Errorf("body %+v\nwant %+v", got, want)
	}
	h := rc.headers[0]
	if h.Get("X-Sluice-Signature") != Sign("s3cret", rc.bodies[0]) || !strings.HasPrefix(h.Get("X-Sluice-Signature"), "sha256=") ||
		h.Get("X-Sluice-Event") != "policy.save" || h.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", h)
	}
	// The signature is the HMAC of the exact body with the secret.
	if Sign("s3cret", rc.bodies[0]) == Sign("other", rc.bodies[0]) {
		t.Error("the signature does not depend on the secret")
	}
}

func TestWebhookRetriesThenGivesUpAndCountsIt(t *testing.T) {
	rc := &receiver{status: http.StatusBadGateway}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	w := start(t, Options{URL: srv.URL, Attempts: 3, Backoff: time.Millisecond})
	w.Notify(save)
	waitFor(t, "the failure", func() bool { return testutil.ToFloat64(w.results.WithLabelValues("failed")) == 1 })
	if rc.count() != 3 {
		t.Errorf("%d attempts, want 3", rc.count())
	}
	if s := testutil.ToFloat64(w.results.WithLabelValues("sent")); s != 0 {
		t.Errorf("sent %v", s)
	}
}

// TestNotifyNeverBlocksTheChange: with nothing delivering, Notify returns
// at once; events beyond the queue are dropped and counted.
func TestNotifyNeverBlocksTheChange(t *testing.T) {
	w, err := New(Options{URL: "http://127.0.0.1:1/hook", Queue: 2})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for range 5 {
			w.Notify(save)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Notify blocked")
	}
	if d := testutil.ToFloat64(w.results.WithLabelValues("dropped")); d != 3 {
		t.Errorf("dropped %v, want 3", d)
	}
}

// By default both kinds of reset are sent, as every change is; logins
// are not.
func TestResetsOfOneClientAndOfAWholeRuleAreSentByDefault(t *testing.T) {
	w, err := New(Options{URL: "https://hooks.example.com/x"})
	if err != nil {
		t.Fatal(err)
	}
	for action, want := range map[string]bool{"client.reset": true, "rule.reset": true, "policy.save": true, "login": false, "login.failed": false} {
		if w.Wants(action) != want {
			t.Errorf("Wants(%q) = %v by default", action, !want)
		}
	}
}

func TestActionsSelectWhatIsSent(t *testing.T) {
	w, err := New(Options{URL: "https://hooks.example.com/x", Actions: []string{"policy.", "auth.lockout"}})
	if err != nil {
		t.Fatal(err)
	}
	for action, want := range map[string]bool{"policy.save": true, "policy.rollback": true, "auth.lockout": true,
		"auth.lockouts": false, "trial.start": false, "login": false, "policy": false} {
		if w.Wants(action) != want {
			t.Errorf("Wants(%q) = %v", action, !want)
		}
	}
	for _, bad := range []Options{{URL: "ftp://x"}, {URL: "hooks.example.com"}, {URL: ""}, {URL: "https://x", Actions: []string{"a b"}}} {
		if _, err := New(bad); err == nil || !strings.HasPrefix(err.Error(), "-notify-") {
			t.Errorf("%+v: %v, want an error naming the flag", bad, err)
		}
	}
}

func TestTextSaysWhatHappened(t *testing.T) {
	for _, c := range []struct {
		e    store.AuditEntry
		want string
	}{
		{store.AuditEntry{Actor: "bo", Action: "policy.rollback", Version: 9, FromVersion: 4, Detail: "restores v4 over v8"}, "Sluice: bo rolled the policy back (v9): restores v4 over v8"},
		{store.AuditEntry{Actor: "bo", Action: "trial.start", Target: "trial 3", FromVersion: 8}, "Sluice: bo started trial 3 over v8"},
		{store.AuditEntry{Actor: "bo", Action: "trial.promote", Target: "trial 3", Version: 10}, "Sluice: bo promoted trial 3 as policy v10"},
		{store.AuditEntry{Actor: "admin", Action: "user.update", Target: "pay", Detail: "policies payments-*"}, "Sluice: admin user.update pay: policies payments-*"},
		{store.AuditEntry{Actor: "ann", Action: "policy.tests", Detail: "revision 2, 340 bytes"}, "Sluice: ann changed the policy tests: revision 2, 340 bytes"},
		{store.AuditEntry{Actor: "ann", Action: "policy.propose", Target: "change 3", FromVersion: 7, Detail: "burst 40"}, "Sluice: ann proposed change 3 on v7 for review: burst 40"},
		{store.AuditEntry{Actor: "bob", Action: "policy.approve", Target: "change 3", Version: 8}, "Sluice: bob approved change 3 as policy v8"},
		{store.AuditEntry{Actor: "bob", Action: "policy.reject", Target: "change 4", Detail: "too wide"}, "Sluice: bob rejected change 4: too wide"},
		{store.AuditEntry{Actor: "ann", Action: "policy.save", Version: 5, FromVersion: 4, Detail: "burst 40 [saved without running the tests]"},
			"Sluice: ann saved policy v5 (on v4): burst 40 [saved without running the tests]"},
		{store.AuditEntry{Actor: "ann", Action: "rule.reset", Target: "free-tier", Detail: "reset every identity under free-tier (lq3x9k2-5f1c0a)"},
			"Sluice: ann reset every identity's state under free-tier: reset every identity under free-tier (lq3x9k2-5f1c0a)"},
	} {
		if got := Text(c.e); got != c.want {
			t.Errorf("Text = %q, want %q", got, c.want)
		}
	}
}

// TestLogNotifiesWhatItAppends: the audit log wrapper appends, then
// notifies; an entry the store refuses is not notified.
func TestLogNotifiesWhatItAppends(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w, _ := New(Options{URL: "https://hooks.example.com/x"})
	l := Log{AuditLog: st, Hook: w}
	if err := l.AppendAudit(context.Background(), save); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.ListAudit(context.Background(), store.AuditFilter{}); len(got) != 1 || len(w.queue) != 1 {
		t.Errorf("%d entries stored, %d queued; want 1 and 1", len(got), len(w.queue))
	}
}
