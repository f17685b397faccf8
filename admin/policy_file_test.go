package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

// The admin started with -policy-file pushes the file before it serves,
// then each change of it within the interval, audited as saves by git, and
// refuses saves from its API.
func TestAdminFollowsItsPolicyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	write := func(n int) {
		if err := os.WriteFile(path, []byte(replicaPolicy(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(7)
	port := func() string { return "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t)) }
	r := &replica{http: port(), xds: port(), stderr: &bytes.Buffer{}}
	startAdminProcess(t, r, []string{"SLUICE_POLICY_FILE=" + path}, "-policy-file-interval", "1s")
	versions := watchXDS(t, r.xds)
	waitVersion(t, versions, 2, 5*time.Second)
	code, cur := r.call("GET", "/api/v1/policy", nil)
	follows, _ := cur["follows"].(map[string]any)
	if code != http.StatusOK || cur["author"] != "git" || follows["applied"] != true || !strings.Contains(fmt.Sprint(cur["policy"]), "name:r7") {
		t.Fatalf("the current version: %d %v", code, cur)
	}
	write(8)
	waitVersion(t, versions, 3, 10*time.Second)
	code, out := r.call("POST", "/api/v1/policy", map[string]any{"base_version": 3, "policy": json.RawMessage(replicaPolicy(9))})
	if code != http.StatusConflict || out["follows"] != path {
		t.Errorf("a save from the API: %d %v", code, out)
	}
	// A save is pushed before it is counted and audited: wait for both.
	var metrics []byte
	var audit map[string]any
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("GET", "http://"+r.http+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+replicaToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		_, audit = r.call("GET", "/api/v1/audit?action=policy.save", nil)
		entries, _ := audit["entries"].([]any)
		if strings.Contains(string(metrics), `sluice_admin_policy_file_saves_total{what="policy"} 2`) && len(entries) == 2 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"sluice_admin_policy_file_in_sync 1", `sluice_admin_policy_file_saves_total{what="policy"} 2`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if entries, _ := audit["entries"].([]any); len(entries) != 2 || entries[0].(map[string]any)["actor"] != "git" {
		t.Errorf("the audit log: %v", audit)
	}
}
