package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/trial"
)

func TestAPIReviewedSaveWaitsForAnotherEditor(t *testing.T) {
	e := newEnv(t, nil)
	e.svc.SetReviewRequired(true)
	ann, bob := addUser(t, e, "ann", auth.RoleEditor), addUser(t, e, "bob", auth.RoleEditor)
	resp, m := e.call(t, "POST", "/api/v1/policy", ann, "application/json", `{"base_version":1,"message":"per-ip","policy":`+perIP+`}`)
	proposed, _ := m["proposed"].(map[string]any)
	if resp.StatusCode != http.StatusAccepted || proposed == nil || proposed["id"] != 1.0 || proposed["state"] != "open" || proposed["author"] != "ann" {
		t.Fatalf("a save under review: %d %v", resp.StatusCode, m)
	}
	if cur, _ := e.svc.Current(context.Background()); cur.Number != 1 {
		t.Fatalf("the proposal saved v%d", cur.Number)
	}
	if resp, m := e.call(t, "GET", "/api/v1/changes/1", bob, "", ""); resp.StatusCode != http.StatusOK || !regexp.MustCompile(`(?m)^\+\s+"name": "per-ip",$`).MatchString(m["diff"].(string)) {
		t.Fatalf("the change: %d %v", resp.StatusCode, m)
	}
	if resp, m := e.call(t, "POST", "/api/v1/changes/1/approve", ann, "application/json", ""); resp.StatusCode != http.StatusForbidden || !strings.Contains(m["error"].(string), "another editor must approve it") {
		t.Fatalf("approving one's own: %d %v", resp.StatusCode, m)
	}
	resp, m = e.call(t, "POST", "/api/v1/changes/1/approve", bob, "application/json", "")
	if resp.StatusCode != http.StatusCreated || m["version"] != 2.0 || m["author"] != "ann" || m["message"] != "per-ip (change 1, approved by bob)" {
		t.Fatalf("approved: %d %v", resp.StatusCode, m)
	}
	if resp, m := e.call(t, "POST", "/api/v1/changes/1/reject", bob, "application/json", `{"reason":"late"}`); resp.StatusCode != http.StatusConflict || m["change"] == nil {
		t.Fatalf("deciding twice: %d %v", resp.StatusCode, m)
	}
	// A second change, rejected with a reason; listed by state.
	e.call(t, "POST", "/api/v1/policy", ann, "application/json", `{"base_version":2,"policy":`+perIPBurst20+`}`)
	if resp, m := e.call(t, "POST", "/api/v1/changes/2/reject", bob, "application/json", `{"reason":"too generous"}`); resp.StatusCode != http.StatusOK || m["state"] != "rejected" || m["reason"] != "too generous" {
		t.Fatalf("rejected: %d %v", resp.StatusCode, m)
	}
	if _, m := e.call(t, "GET", "/api/v1/changes?state=open", bob, "", ""); len(m["changes"].([]any)) != 0 || m["review_required"] != true {
		t.Fatalf("open: %v", m)
	}
	if _, m := e.call(t, "GET", "/api/v1/changes", bob, "", ""); len(m["changes"].([]any)) != 2 {
		t.Fatalf("all: %v", m)
	}
	for path, want := range map[string]int{"/api/v1/changes/9": 404, "/api/v1/changes/x": 400, "/api/v1/changes?state=pending": 400} {
		if resp, _ := e.call(t, "GET", path, bob, "", ""); resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	entries, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "policy."})
	var actions []string
	for _, a := range entries {
		actions = append(actions, a.Actor+" "+a.Action+" "+a.Target)
	}
	got := strings.Join(actions, "\n")
	for _, want := range []string{"ann policy.propose change 1", "bob policy.approve change 1", "ann policy.propose change 2", "bob policy.reject change 2"} {
		if !strings.Contains(got, want) {
			t.Errorf("audit lacks %q:\n%s", want, got)
		}
	}
}

func TestPolicyPageProposesAndTheChangesPageApproves(t *testing.T) {
	e := newEnv(t, nil)
	e.svc.SetReviewRequired(true)
	addUser(t, e, "ann", auth.RoleEditor)
	addUser(t, e, "bob", auth.RoleEditor)
	ann := loginAs(t, e, "ann")
	page := get(t, ann, e.srv.URL+"/")
	if !strings.Contains(page, "Propose for review") {
		t.Fatal("the policy page does not say saves are proposed")
	}
	tok := csrfOf(t, page)
	resp, _ := post(t, ann, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {perIP}, "message": {"per-ip"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/changes/1?proposed=1" {
		t.Fatalf("propose: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	page = get(t, ann, e.srv.URL+"/changes/1?proposed=1")
	if !strings.Contains(page, "Proposed as change 1") || !strings.Contains(page, `id="withdraw"`) || strings.Contains(page, `id="approve"`) {
		t.Fatalf("the author's view:\n%s", page)
	}
	bob := loginAs(t, e, "bob")
	page = get(t, bob, e.srv.URL+"/changes")
	if !strings.Contains(page, `data-change="1"`) || !strings.Contains(page, "per-ip") {
		t.Fatalf("the list:\n%s", page)
	}
	page = get(t, bob, e.srv.URL+"/changes/1")
	if !strings.Contains(page, `id="approve"`) || !strings.Contains(page, `&#34;per-ip&#34;`) {
		t.Fatalf("the reviewer's view:\n%s", page)
	}
	resp, _ = post(t, bob, e.srv.URL+"/changes/1/approve", url.Values{"csrf": {csrfOf(t, page)}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?saved=2" {
		t.Fatalf("approve: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A change on a stale base: approval refused, the change stays open.
	post(t, ann, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"1"}, "policy": {perIPBurst20}})
	page = get(t, bob, e.srv.URL+"/changes/2")
	if !strings.Contains(page, `id="stale-base"`) {
		t.Fatalf("no stale warning:\n%s", page)
	}
	if list := get(t, bob, e.srv.URL+"/changes"); !strings.Contains(list, `<span class="badge error stale" title="v2 was saved since`) {
		t.Errorf("the list does not mark change 2 stale:\n%s", list)
	}
	if _, j := e.apiJSON(t, "GET", "/api/v1/changes?state=open", ""); fmt.Sprint(j["changes"]) == "" || !strings.Contains(fmt.Sprint(j["changes"]), "stale:true") {
		t.Errorf("the API does not mark change 2 stale: %v", j)
	}
	resp, body := post(t, bob, e.srv.URL+"/changes/2/approve", url.Values{"csrf": {csrfOf(t, page)}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "Not approved: version conflict") {
		t.Fatalf("a stale approval: %d\n%s", resp.StatusCode, body)
	}
	resp, _ = post(t, ann, e.srv.URL+"/changes/2/withdraw", url.Values{"csrf": {tok}, "reason": {"stale"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("withdraw: %d", resp.StatusCode)
	}
	if page := get(t, bob, e.srv.URL+"/changes/2"); !strings.Contains(page, "withdrawn") || !strings.Contains(page, "stale") {
		t.Fatalf("withdrawn:\n%s", page)
	}
}

// A trial's promotion under review is a change like any save.
func TestTrialPromotionUnderReviewIsProposed(t *testing.T) {
	te := &trialEnv{xds: &fakeXDS{}}
	var svc *policies.Service
	te.env = newEnv(t, func(c *Config) {
		st := c.Audit.(*store.Store)
		te.trials = trial.NewService(nil, te.xds, nil)
		svc = policies.New(st, te.trials.Publisher(te.xds), nil)
		if _, err := svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		te.trials.SetPolicies(svc)
		c.Policies, c.Trials = svc, te.trials
	})
	t.Cleanup(func() { te.trials.Stop(context.Background()) })
	svc.SetReviewRequired(true)
	te.apiJSON(t, "POST", "/api/v1/trial", `{"policy":`+trialDraft+`}`)
	resp, m := te.apiJSON(t, "POST", "/api/v1/trial/promote", `{"message":"tighter per-ip"}`)
	if proposed, _ := m["proposed"].(map[string]any); resp.StatusCode != http.StatusAccepted || proposed == nil || proposed["message"] != "tighter per-ip" {
		t.Fatalf("promote under review: %d %v", resp.StatusCode, m)
	}
	if cur, _ := svc.Current(context.Background()); cur.Number != 1 {
		t.Fatalf("the promotion saved v%d", cur.Number)
	}
}

// With review limited to some policies, the API saves a change to another
// policy at once (201) and proposes one to a listed policy (202); the
// changes list names the policies, and the pages say which saves wait.
func TestReviewOfSomePoliciesOnlyIsSaidWhereSavesHappen(t *testing.T) {
	e := newEnv(t, nil)
	e.svc.SetReviewRequired(true)
	sc, _ := policies.ParseScope("payments-*")
	e.svc.SetReviewPolicies(sc)
	ann := addUser(t, e, "ann", auth.RoleEditor)
	shadowPerIP := strings.Replace(perIP, `{"rules"`, `{"mode":"shadow","rules"`, 1) // the default version's mode kept
	if resp, m := e.call(t, "POST", "/api/v1/policy", ann, "application/json", `{"base_version":1,"policy":`+shadowPerIP+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a save of the default policy only: %d %v", resp.StatusCode, m)
	}
	payments := `{"mode":"shadow","policies":[{"name":"default","rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]},{"name":"payments-api","rules":[{"name":"p","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`
	if resp, m := e.call(t, "POST", "/api/v1/policy", ann, "application/json", `{"base_version":2,"policy":`+payments+`}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a save adding payments-api: %d %v", resp.StatusCode, m)
	}
	_, m := e.call(t, "GET", "/api/v1/changes", ann, "", "")
	if got, _ := m["review_policies"].([]any); len(got) != 1 || got[0] != "payments-*" {
		t.Errorf("the changes list: %v", m)
	}
	c := login(t, e, "bob")
	if page := get(t, c, e.srv.URL+"/changes"); !strings.Contains(page, `id="review-only"`) || !strings.Contains(page, "<code>payments-*</code>") {
		t.Error("the changes page does not name the reviewed policies")
	}
	if page := get(t, c, e.srv.URL+"/"); !strings.Contains(page, "Save, or propose for review") || !strings.Contains(page, "A change to payments-* or to a top-level setting waits") {
		t.Error("the policy page's Save button does not say which saves wait")
	}
}
