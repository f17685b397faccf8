package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/policies"
)

// A policy that follows its file: the policy page says so and whether the
// file is applied, its Save button is off, and saves, rollbacks and tests
// from the page or the API are refused (409) naming the file.
func TestAPolicyKeptInGitRefusesChangesHere(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, []byte(perIP), 0o644); err != nil {
		t.Fatal(err)
	}
	e.svc.FollowFile(policies.FileSource{Policy: path})
	if st := e.svc.LookAtFile(ctx); st.Version != 2 {
		t.Fatalf("the file was not applied: %+v", st)
	}
	c := login(t, e, "alice")
	page := get(t, c, e.srv.URL+"/")
	for _, want := range []string{`id="follows" data-applied="true"`, "This policy follows <code>" + path + "</code>", "v2 is the file", `disabled title="The policy follows its file`} {
		if !strings.Contains(page, want) {
			t.Errorf("the policy page lacks %s", want)
		}
	}
	tok := csrfOf(t, page)
	resp, body := post(t, c, e.srv.URL+"/policy", url.Values{"csrf": {tok}, "base_version": {"2"}, "policy": {perIP}, "message": {"m"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "the policy follows "+path) {
		t.Errorf("a save from the page: %d", resp.StatusCode)
	}
	resp, got := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+perIP+`}`)
	if resp.StatusCode != http.StatusConflict || got["follows"] != path {
		t.Errorf("a save from the API: %d %v", resp.StatusCode, got)
	}
	if resp, got := e.apiJSON(t, "POST", "/api/v1/policy/rollback", `{"to":1,"base_version":2}`); resp.StatusCode != http.StatusConflict {
		t.Errorf("a rollback from the API: %d %v", resp.StatusCode, got)
	}
	resp, got = e.apiJSON(t, "GET", "/api/v1/policy", "")
	follows, _ := got["follows"].(map[string]any)
	if resp.StatusCode != http.StatusOK || follows["file"] != path || follows["applied"] != true || len(follows["sha256"].(string)) != 64 {
		t.Errorf("the current version: %v", got)
	}

	if err := os.WriteFile(path, []byte(`{"rules": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.svc.LookAtFile(ctx)
	page = get(t, c, e.srv.URL+"/")
	if !strings.Contains(page, `data-applied="false"`) || !strings.Contains(page, "The file is not applied: "+path+": invalid configuration") {
		t.Error("the policy page does not say the file is not applied")
	}
	if _, got = e.apiJSON(t, "GET", "/api/v1/policy", ""); got["follows"].(map[string]any)["applied"] != false {
		t.Errorf("the current version, the file invalid: %v", got)
	}
}
