package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// TestTryItExamplesDoWhatTheySayUnderDemoTraffic runs the gateway as
// `make run` does (demo policy, demo upstream, 40 requests per second of
// demo traffic), reads the commands it prints, runs each one with bash and
// curl, and checks the output says what the banner says it will.
func TestTryItExamplesDoWhatTheySayUnderDemoTraffic(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl is needed to run the printed examples")
		}
		t.Skip("no curl")
	}
	wasmPath := filepath.Join(t.TempDir(), "ratelimit.wasm")
	if err := os.WriteFile(wasmPath, wasmtest.Build(t, "./plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, Options{Listen: "127.0.0.1:0", Upstream: "demo", ConfigPath: "demo-config.json", WasmPath: wasmPath,
			VMs: 2, ReloadInterval: time.Second, DemoTraffic: 40}, slog.New(slog.DiscardHandler), pw)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	var printed []string
	base := ""
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "Ctrl-C") {
		line := sc.Text()
		if u, ok := strings.CutPrefix(line, "Sluice development gateway is running: "); ok {
			base = u
		}
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(strings.TrimSpace(line), "#") && !strings.HasPrefix(line, "  upstream:") {
			printed = append(printed, strings.TrimSpace(line))
		}
	}
	go io.Copy(io.Discard, pr)
	examples := tryItExamples(base)
	if base == "" || len(printed) != len(examples) {
		t.Fatalf("banner printed %d commands for %q, want %d", len(printed), base, len(examples))
	}
	time.Sleep(2 * time.Second) // let the demo traffic run: it must not spend the examples' tokens
	for i, cmd := range printed {
		if cmd != examples[i].cmd {
			t.Fatalf("printed command %d %q is not example %q", i, cmd, examples[i].cmd)
		}
		c := exec.Command("bash", "-c", cmd)
		c.Env = append(os.Environ(), "PATH="+filepath.Dir(curl)+":"+os.Getenv("PATH"))
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		if !examples[i].output.Match(out) {
			t.Errorf("%s\nprinted:\n%s\nthe banner says: %s", cmd, out, examples[i].says)
		}
	}
}

func TestTryItOnlyForTheDemoPolicy(t *testing.T) {
	withTelemetry := strings.Replace(string(demoConfig), `"mode": "enforce",`,
		`"mode": "enforce", "telemetry": {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN"},`, 1)
	if withTelemetry == string(demoConfig) {
		t.Fatal("the demo policy changed: update how make run adds its telemetry block")
	}
	for _, tc := range []struct {
		name, config string
		demo         bool
	}{
		{"demo policy", string(demoConfig), true},
		{"demo policy with make run's telemetry block", withTelemetry, true},
		{"another policy", enforceConfig, false},
		{"the demo policy with another burst", strings.Replace(string(demoConfig), `"burst": 10`, `"burst": 11`, 1), false},
		{"not JSON", "{", false},
	} {
		if got := isDemoConfig([]byte(tc.config)); got != tc.demo {
			t.Errorf("%s: isDemoConfig = %v, want %v", tc.name, got, tc.demo)
		}
	}
}

func TestMissingClustersNameTheFieldAndTheFlag(t *testing.T) {
	config := []byte(`{"telemetry": {"cluster": "sluice_admin", "token": "telemetry-token-0123456789abcdef"},
	  "fleet": {"cluster": "sluice_rls"},
	  "rules": [{"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"tokens_per_second": 100, "burst": 100}}]}`)
	got := missingClusters(config, map[string]bool{"sluice_admin": true})
	if len(got) != 1 || got[0].Cluster != "sluice_rls" || got[0].Field != "fleet.cluster" || got[0].Example != "sluice_rls=h2c://127.0.0.1:8081" {
		t.Fatalf("missing %+v, want only sluice_rls (fleet.cluster) with an h2c:// example", got)
	}
	if got := missingClusters(config, map[string]bool{"sluice_admin": true, "sluice_rls": true}); len(got) != 0 {
		t.Fatalf("missing %+v with both clusters given", got)
	}
	if got := missingClusters(config, nil); len(got) != 2 || got[0].Field != "telemetry.cluster" {
		t.Fatalf("missing %+v, want telemetry.cluster then fleet.cluster", got)
	}
}
