package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/notify"
)

// TestAdminNotifiesSavesToTheWebhook: with -notify-url and
// SLUICE_NOTIFY_SECRET, a policy saved through the API reaches the
// webhook, signed, saying who saved which version.
func TestAdminNotifiesSavesToTheWebhook(t *testing.T) {
	type delivery struct {
		event notify.Event
		valid bool
	}
	got := make(chan delivery, 8)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e notify.Event
		json.Unmarshal(body, &e)
		got <- delivery{e, r.Header.Get("X-Sluice-Signature") == notify.Sign("hook-s3cret", body)}
	}))
	t.Cleanup(hook.Close)
	port := func() string { return "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t)) }
	r := startAdminProcess(t, &replica{http: port(), xds: port(), stderr: &bytes.Buffer{}},
		[]string{"SLUICE_NOTIFY_SECRET=hook-s3cret"}, "-notify-url", hook.URL)
	if code, v := r.save(1, 7); code != http.StatusCreated || v != 2 {
		t.Fatalf("save: %d v%d", code, v)
	}
	select {
	case d := <-got:
		if !d.valid || d.event.Action != "policy.save" || d.event.Version != 2 || d.event.Actor != "admin" ||
			!strings.Contains(d.event.Text, "saved policy v2") {
			t.Errorf("notification %+v (signature valid: %v)", d.event, d.valid)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no notification within 10 s: %s", r.stderr)
	}
}

func TestNotifyFlagErrorsNameTheFlag(t *testing.T) {
	for _, k := range []string{"SLUICE_NOTIFY_URL", "SLUICE_NOTIFY_ACTIONS", "SLUICE_NOTIFY_SECRET"} {
		t.Setenv(k, "")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-notify-url", "hooks.slack.com/x"}, "-notify-url:"},
		{[]string{"-notify-url", "https://hooks.example.com/x", "-notify-actions", "policy. save"}, "-notify-actions:"},
	} {
		if _, err := parseOptions(c.args, io.Discard); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error starting %q", c.args, err, c.want)
		}
	}
	t.Setenv("SLUICE_NOTIFY_SECRET", "from-env")
	o, err := parseOptions([]string{"-notify-url", "https://hooks.example.com/x", "-notify-actions", "policy., auth.lockout"}, io.Discard)
	if err != nil || o.Notify.Secret != "from-env" || len(o.Notify.Actions) != 2 {
		t.Errorf("%+v %v", o.Notify, err)
	}
}
