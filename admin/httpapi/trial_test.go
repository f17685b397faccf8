package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/admin/trial"
	"github.com/sluice-rl/sluice/internal/poll"
	"github.com/sluice-rl/sluice/shared/policy"
)

const trialDraft = `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`

// fakeXDS pushes like admin/xds: what the nodes run is the last version
// published, or the trial configuration pushed over it.
type fakeXDS struct {
	mu        sync.Mutex
	published []byte
	running   []byte
	pushes    int
}

func (f *fakeXDS) Publish(_ context.Context, v policies.Version) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published, f.running = v.JSON, v.JSON
	f.pushes++
	return nil
}

func (f *fakeXDS) PushTrial(_ context.Context, _ int64, cfg []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = cfg
	f.pushes++
	return nil
}

func (f *fakeXDS) EndTrial(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = f.published
	f.pushes++
	return nil
}

// runs returns the rule names the nodes run now, with their modes.
func (f *fakeXDS) runs(t *testing.T) map[string]string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg, err := policy.Parse(f.running)
	if err != nil {
		t.Fatalf("the pushed configuration is invalid: %v", err)
	}
	out := map[string]string{}
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			out[r.Name] = string(r.Mode)
		}
	}
	return out
}

type trialEnv struct {
	*env
	xds    *fakeXDS
	trials *trial.Service
}

// newTrialEnv wires a trial service as main does: the policy service
// publishes through the trial's Publisher to an xDS double.
func newTrialEnv(t *testing.T) *trialEnv {
	t.Helper()
	te := &trialEnv{xds: &fakeXDS{}}
	te.env = newEnv(t, func(c *Config) {
		st := c.Audit.(*store.Store)
		te.trials = trial.NewService(nil, te.xds, nil)
		svc := policies.New(st, te.trials.Publisher(te.xds), nil)
		if _, err := svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		te.trials.SetPolicies(svc)
		c.Policies, c.Trials = svc, te.trials
	})
	t.Cleanup(func() { te.trials.Stop(context.Background()) })
	return te
}

func TestTrialAPIStartRefusesASecondAndEndRepushesTheVersion(t *testing.T) {
	e := newTrialEnv(t)
	resp, m := e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`,"duration":"10m"}`)
	if resp.StatusCode != http.StatusCreated || m["id"] != 1.0 || m["base_version"] != 1.0 {
		t.Fatalf("start: %d %v", resp.StatusCode, m)
	}
	if got := e.xds.runs(t); got["trial-per-ip"] != string(policy.ModeShadow) {
		t.Errorf("the nodes run %v, want trial-per-ip in shadow", got)
	}
	resp, m = e.apiJSON(t, "GET", "/api/v1/trial", "")
	if resp.StatusCode != http.StatusOK || m["running"] != true || len(m["rules"].([]any)) != 1 {
		t.Errorf("GET: %d %v", resp.StatusCode, m)
	}

	resp, m = e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`}`)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(m["error"].(string), "trial 1 by api is running") {
		t.Errorf("a second trial: %d %v", resp.StatusCode, m)
	}

	resp, m = e.apiJSON(t, "POST", "/api/v1/trial/end", `{}`)
	if resp.StatusCode != http.StatusOK || m["ended"] != 1.0 {
		t.Fatalf("end: %d %v", resp.StatusCode, m)
	}
	if got := e.xds.runs(t); len(got) == 0 || got["trial-per-ip"] != "" {
		t.Errorf("after the end the nodes run %v, want the current version without trial rules", got)
	}
	if resp, _ := e.apiJSON(t, "POST", "/api/v1/trial/end", `{}`); resp.StatusCode != http.StatusConflict {
		t.Errorf("ending with no trial: %d, want 409", resp.StatusCode)
	}
	entries, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "trial."})
	if len(entries) != 2 {
		t.Errorf("audit entries %+v, want trial.start and trial.end", entries)
	}
}

func TestTrialAPIRefusesAnInvalidDraftLikeASave(t *testing.T) {
	e := newTrialEnv(t)
	bad := strings.Replace(trialDraft, `"burst":2`, `"burst":0`, 1)
	resp, m := e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+bad+`}`)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(toJSONText(m["errors"]), "rules[0].algorithm_config.burst") {
		t.Errorf("an invalid draft: %d %v", resp.StatusCode, m)
	}
	resp, m = e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`,"duration":"forever"}`)
	if resp.StatusCode != http.StatusBadRequest || m["field"] != "duration" {
		t.Errorf("a bad duration: %d %v", resp.StatusCode, m)
	}
	if _, ok := e.trials.Running(); ok {
		t.Error("a refused trial runs")
	}
}

func toJSONText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestTrialExpiryRepushesTheVersion(t *testing.T) {
	e := newTrialEnv(t)
	if resp, m := e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`,"duration":"1s"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("start: %d %v", resp.StatusCode, m)
	}
	poll.Until(t, "the trial to expire", func() bool { _, ok := e.trials.Running(); return !ok })
	if got := e.xds.runs(t); got["trial-per-ip"] != "" {
		t.Errorf("after expiry the nodes run %v, want no trial rules", got)
	}
	if _, m := e.apiJSON(t, "GET", "/api/v1/trial", ""); m["running"] != false {
		t.Errorf("GET after expiry: %v", m)
	}
}

func TestTrialPromoteSavesTheDraftAsAVersion(t *testing.T) {
	e := newTrialEnv(t)
	e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`}`)
	resp, m := e.apiJSON(t, "POST", "/api/v1/trial/promote", `{"message":"tighter per-ip"}`)
	if resp.StatusCode != http.StatusCreated || m["version"] != 2.0 || m["message"] != "tighter per-ip" {
		t.Fatalf("promote: %d %v", resp.StatusCode, m)
	}
	if _, cur := e.apiJSON(t, "GET", "/api/v1/policy", ""); cur["version"] != 2.0 || !strings.Contains(toJSONText(cur["policy"]), `"burst":2`) {
		t.Errorf("the current version is not the draft: %v", cur)
	}
	if got := e.xds.runs(t); got["per-ip"] != string(policy.ModeEnforce) || got["trial-per-ip"] != "" {
		t.Errorf("after promotion the nodes run %v, want the promoted version alone", got)
	}
	if _, ok := e.trials.Running(); ok {
		t.Error("the trial still runs after promotion")
	}
}

func TestTrialPromoteAfterASaveIsStale(t *testing.T) {
	e := newTrialEnv(t)
	e.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`}`)
	if resp, m := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+perIP+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("save: %d %v", resp.StatusCode, m)
	}
	// The save is pushed with the trial's rules: the trial goes on over v2.
	if got := e.xds.runs(t); got["per-ip"] != string(policy.ModeEnforce) || got["trial-per-ip"] != string(policy.ModeShadow) {
		t.Errorf("after a save during the trial the nodes run %v", got)
	}
	resp, m := e.apiJSON(t, "POST", "/api/v1/trial/promote", `{}`)
	if resp.StatusCode != http.StatusConflict || m["current_version"] != 2.0 {
		t.Errorf("a stale promotion: %d %v", resp.StatusCode, m)
	}
	if tr, ok := e.trials.Running(); !ok || tr.Over != 2 {
		t.Errorf("the refused promotion ended the trial or lost its version: %+v %v", tr, ok)
	}
}

func TestTrialOfADraftOnAStaleVersionIsRefused(t *testing.T) {
	e := newTrialEnv(t)
	if resp, m := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+perIP+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("save: %d %v", resp.StatusCode, m)
	}
	resp, m := e.apiJSON(t, "POST", "/api/v1/trial", `{"base_version":1,"policy":`+trialDraft+`}`)
	if resp.StatusCode != http.StatusConflict || m["current_version"] != 2.0 {
		t.Errorf("a draft written on v1 while v2 is current: %d %v", resp.StatusCode, m)
	}
	c := login(t, e.env, "alice")
	csrf := csrfOf(t, get(t, c, e.srv.URL+"/"))
	resp, body := post(t, c, e.srv.URL+"/trial", url.Values{"csrf": {csrf}, "policy": {trialDraft}, "base_version": {"1"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "written on an older version") {
		t.Errorf("from the editor: %d", resp.StatusCode)
	}
	if _, ok := e.trials.Running(); ok {
		t.Error("a trial on a stale version runs")
	}
}

func TestTrialViewerIsForbidden(t *testing.T) {
	e := newTrialEnv(t)
	viewer := addUser(t, e.env, "vera", auth.RoleViewer)
	for _, path := range []string{"/api/v1/trial", "/api/v1/trial/end", "/api/v1/trial/promote"} {
		if resp, _ := e.call(t, "POST", path, viewer, "application/json", `{"policy":`+trialDraft+`}`); resp.StatusCode != http.StatusForbidden {
			t.Errorf("viewer POST %s: %d, want 403", path, resp.StatusCode)
		}
	}
	if resp, _ := e.call(t, "GET", "/api/v1/trial", viewer, "", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("viewer GET: %d, want 200", resp.StatusCode)
	}
	if _, ok := e.trials.Running(); ok {
		t.Error("a viewer started a trial")
	}
}

func TestTrialPageStartsFromTheEditorAndEnds(t *testing.T) {
	e := newTrialEnv(t)
	c := login(t, e.env, "alice")
	csrf := csrfOf(t, get(t, c, e.srv.URL+"/"))
	resp, body := post(t, c, e.srv.URL+"/trial", url.Values{"csrf": {csrf}, "policy": {trialDraft}, "base_version": {"1"}, "trial_duration": {"5m"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/trial?started=1" {
		t.Fatalf("Try in shadow: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	page := get(t, c, e.srv.URL+"/trial?started=1")
	for _, want := range []string{"Trial <strong>1</strong> by alice", "trial-per-ip", `id="trial-promote"`, `id="trial-end"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the trial page lacks %q", want)
		}
	}
	resp, body = post(t, c, e.srv.URL+"/trial", url.Values{"csrf": {csrf}, "policy": {trialDraft}, "base_version": {"1"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "trial 1 by alice is running") {
		t.Errorf("a second trial from the editor: %d", resp.StatusCode)
	}
	if resp, _ := post(t, c, e.srv.URL+"/trial/end", url.Values{"csrf": {"forged"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("ending without the CSRF token: %d, want 403", resp.StatusCode)
	}
	resp, _ = post(t, c, e.srv.URL+"/trial/end", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("end: %d", resp.StatusCode)
	}
	if !strings.Contains(get(t, c, e.srv.URL+"/trial"), `id="no-trial"`) {
		t.Error("the page still shows a trial after the end")
	}
}

func TestTrialComparisonShowsRatesAndIdentitiesOnlyTheDraftRejects(t *testing.T) {
	now := time.Unix(1763770000, 0)
	st := telemetry.NewState(telemetry.Options{Now: func() time.Time { return now }})
	ingest := func(seq uint64, n uint64) {
		r := &telemetry.Report{V: 1, Node: "envoy-1", VM: "a", VMStartMS: 1763770000000, Seq: seq, SentAtMS: now.UnixMilli(), IntervalMS: 1000,
			Rules: []telemetry.RuleCounters{
				{Rule: "per-ip", Allowed: 10 * n},
				{Rule: "trial-per-ip", Allowed: 6 * n, ShadowRejected: 4 * n},
			},
			Buckets: []telemetry.Bucket{
				{Rule: "trial-per-ip", Identity: "10.0.0.1", Burst: 2, Rejects: 4 * n},
				{Rule: "trial-per-ip", Identity: "10.0.0.2", Burst: 2, Rejects: 3 * n},
				{Rule: "per-ip", Identity: "10.0.0.2", Burst: 10, Rejects: n},
				{Rule: "trial-per-ip", Identity: "10.0.0.3", Tokens: 2, Burst: 2},
			}}
		if res := st.Ingest(r, now); res != telemetry.Accepted {
			t.Fatalf("ingest: %+v", res)
		}
	}
	ingest(1, 1)
	now = now.Add(time.Second)
	ingest(2, 2)
	s := &server{Config: Config{Telemetry: &Telemetry{State: st, Now: func() time.Time { return now }}}}
	cmp := s.compareTrial(trial.Trial{Pairs: []trial.Pair{{Draft: "per-ip", Trial: "trial-per-ip"}}})
	if !cmp.Telemetry || len(cmp.Rules) != 1 {
		t.Fatalf("comparison %+v", cmp)
	}
	r := cmp.Rules[0]
	if r.Current == nil || r.Draft == nil || r.Current[telemetry.Allowed] <= 0 || r.Draft[telemetry.ShadowRejected] <= 0 || r.Current[telemetry.Rejected] != 0 {
		t.Errorf("rates: current %v, draft %v; want the current allowing and the draft would-rejecting", r.Current, r.Draft)
	}
	if len(cmp.Identities) != 1 || cmp.Identities[0].Identity != "10.0.0.1" || cmp.Identities[0].Rule != "per-ip" {
		t.Errorf("identities %+v, want 10.0.0.1 only (10.0.0.2 is rejected by the current rule too, 10.0.0.3 never)", cmp.Identities)
	}

	off := (&server{}).compareTrial(trial.Trial{Pairs: []trial.Pair{{Draft: "per-ip", Trial: "trial-per-ip"}}})
	if off.Telemetry || len(off.Rules) != 1 || off.Rules[0].Current != nil {
		t.Errorf("without telemetry: %+v, want the rules without rates", off)
	}
}

func FuzzParseTrialDuration(f *testing.F) {
	for _, s := range []string{"", "15m", "1s", "24h", "24h0m1s", "999ms", "-5m", "forever", "1e9h", " 2m "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseTrialDuration(s)
		if err != nil {
			var ie *policies.InputError
			if !errors.As(err, &ie) || ie.Field != "duration" {
				t.Fatalf("%q: %v is not an error naming the duration field", s, err)
			}
			return
		}
		if d < MinTrialDuration || d > trial.MaxDuration {
			t.Fatalf("%q: accepted %v, out of range", s, d)
		}
	})
}
