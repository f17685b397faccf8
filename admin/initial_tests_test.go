package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
)

func TestInitialTestsAreSavedWhenTheyPass(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := policies.New(st, nil, nil)
	demo, err := os.ReadFile("../plugin/gateway/demo-config.json")
	if err != nil {
		t.Fatal(err)
	}
	svc.SetInitialConfig(demo)
	if _, err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	if err := seedTests(ctx, svc, filepath.Join(dir, "missing.yaml"), logger); err == nil || !strings.Contains(err.Error(), "-initial-tests: ") {
		t.Errorf("a missing file: %v", err)
	}
	if err := seedTests(ctx, svc, write("bad.yaml", "tests: [{name: a}]"), logger); err == nil || !strings.Contains(err.Error(), "tests[0].expect (line 1): required") {
		t.Errorf("a file with a mistake: %v", err)
	}
	// Tests the demo policy fails: logged, not saved, the admin goes on.
	failing := "tests: [{name: no limit at all, request: {path: /ip/x}, repeat: 11, expect: {status: 200}}]\n"
	if err := seedTests(ctx, svc, write("failing.yaml", failing), logger); err != nil || !strings.Contains(logs.String(), "-initial-tests: not saved") {
		t.Errorf("failing tests: %v, log %q", err, logs.String())
	}
	if got, _ := svc.Tests(ctx); got.Revision != 0 {
		t.Fatalf("failing tests saved: %+v", got)
	}
	if err := seedTests(ctx, svc, "../plugin/gateway/demo-config.tests.yaml", logger); err != nil {
		t.Fatal(err)
	}
	if got, _ := svc.Tests(ctx); got.Revision != 1 || !strings.Contains(got.Body, "a free key gets a burst of 5") {
		t.Fatalf("the demo tests: %+v", got)
	}
}
