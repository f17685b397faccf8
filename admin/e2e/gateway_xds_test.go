package e2e

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/xds"
	"github.com/sluice-rl/sluice/internal/poll"
)

// TestGatewayBinaryFollowsTheAdminXDSServer: the gateway binary, with only
// -xds (its default resource name and node cluster), takes its policy from
// the admin's xDS server, ACKs it, applies it, and NACKs a policy the
// plugin refuses with the plugin's reason while the last one stays in force.
func TestGatewayBinaryFollowsTheAdminXDSServer(t *testing.T) {
	root, bin, wasmFile := buildStack(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := xds.NewServer(slog.New(slog.DiscardHandler), xds.Options{WasmPath: wasmFile})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("xds Serve: %v", err)
		}
	})
	bootFile := filepath.Join(t.TempDir(), "boot.json")
	if err := os.WriteFile(bootFile, []byte(bootConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := start(t, "gateway", root, filepath.Join(bin, "ratelimit-gateway"),
		[]string{"-listen", "127.0.0.1:0", "-upstream", "demo", "-wasm", wasmFile, "-config", bootFile,
			"-xds", lis.Addr().String(), "-node-id", "e2e-gateway", "-vms", "1"},
		nil, regexp.MustCompile(`gateway is running: (http://\S+)`))
	node := func() xds.NodeStatus {
		for _, n := range srv.Nodes() {
			if n.ID == "e2e-gateway" {
				return n
			}
		}
		return xds.NodeStatus{}
	}

	if err := srv.Publish(ctx, xds.Version{Number: 1, JSON: []byte(validDraft)}); err != nil {
		t.Fatal(err)
	}
	poll.Within(t, 15*time.Second, "the gateway to ACK version 1", func() bool { return node().AckedVersion == "1" })
	if got := hit(t, gw[1], 5); got != "200 200 200 429 429" {
		t.Fatalf("statuses under version 1: %s, want a burst of 3 then 429", got)
	}

	if err := srv.Publish(ctx, xds.Version{Number: 2, JSON: []byte(strings.Replace(validDraft, "token_bucket", "leaky_nope", 1))}); err != nil {
		t.Fatal(err)
	}
	poll.Within(t, 15*time.Second, "the gateway to NACK version 2", func() bool { return node().NackedVersion == "2" })
	if n := node(); n.AckedVersion != "1" || !strings.Contains(n.NackError, "leaky_nope") {
		t.Errorf("after the invalid policy: %+v, want version 1 kept and a NACK naming the bad algorithm", n)
	}
	if got := hit(t, gw[1], 1); got != "429" {
		t.Fatalf("after the NACK: %s, want version 1's 429 (bucket still empty)", got)
	}
}
