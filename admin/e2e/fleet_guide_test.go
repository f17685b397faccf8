package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/internal/poll"
)

// guidePorts are the ports docs/fleet.md's step-by-step guide uses; the
// test gives each a free port instead, so it can run beside anything else.
var guidePorts = regexp.MustCompile(`\b(6379|9000|18000|18081|8080|8081)\b`)

// guideBlocks returns the shell blocks of docs/fleet.md marked
// <!-- fleet-guide -->, in order.
func guideBlocks(t *testing.T, root string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)<!-- fleet-guide -->\n```sh\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// TestFleetGuideCommands follows docs/fleet.md's "Set it up step by step"
// as a new user would, running its shell blocks as written (the binaries
// `make build` makes are built into bin/ beforehand, and every port is
// replaced by a free one): Redis, the admin as the rate limit service, two
// gateways, then the documented loop of 30 requests, which must show one
// global limit: about the burst of 10 admitted across both gateways, where
// two local limits would admit 20.
func TestFleetGuideCommands(t *testing.T) {
	fleettest.Require(t, "redis-server", "apt-get install redis-server")
	fleettest.Require(t, "curl", "apt-get install curl")
	root, bin, _ := buildStack(t)
	blocks := guideBlocks(t, root)
	if len(blocks) != 6 || strings.TrimSpace(blocks[0]) != "make build" {
		t.Fatalf("docs/fleet.md has %d guide blocks starting %q; the test expects build, Redis, policy, admin, gateways, requests", len(blocks), blocks[0])
	}
	work := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(work, "bin")); err != nil {
		t.Fatal(err)
	}
	ports := map[string]string{}
	rewrite := func(s string) string {
		return guidePorts.ReplaceAllStringFunc(s, func(p string) string {
			if ports[p] == "" {
				ports[p] = fmt.Sprint(fleettest.FreePort(t))
			}
			return ports[p]
		})
	}

	var out string
	for i, block := range blocks[1:] {
		script := rewrite(block)
		if strings.HasSuffix(strings.TrimSpace(script), "&") {
			background(t, work, script)
			for _, addr := range regexp.MustCompile(`(?:-listen|--port) (?:127\.0\.0\.1:)?(\d+)`).FindAllStringSubmatch(script, -1) {
				waitListening(t, "127.0.0.1:"+addr[1])
			}
			continue
		}
		cmd := exec.Command("bash", "-e", "-c", script)
		cmd.Dir = work
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("guide block %d failed: %v\n%s\n%s", i+2, err, script, b)
		}
		out = string(b)
	}

	codes := strings.Fields(out)
	admitted, rejected := 0, 0
	for _, c := range codes {
		switch c {
		case "200":
			admitted++
		case "429":
			rejected++
		}
	}
	t.Logf("the guide's requests: %s", out)
	// 30 requests take a few seconds at most; each second refills one token.
	if len(codes) != 30 || admitted+rejected != 30 || admitted < 8 || admitted > 16 {
		t.Fatalf("%d admitted, %d rejected of %d: want about the burst of 10 across both gateways (20 would be two local limits)",
			admitted, rejected, len(codes))
	}
}

// background runs script with bash in its own process group until the test
// ends, then stops the group.
func background(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", script+"\nwait")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("%s\noutput:\n%s", script, log.String())
		}
	})
}

// waitListening waits until something accepts connections on addr.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	poll.Within(t, 30*time.Second, addr+" to listen", func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}
