package fleettest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RatelimitModule and RatelimitVersion pin envoyproxy/ratelimit, the
// reference rate limit service, as a stand-in for the admin's RLS in
// interoperability tests. The project tags no releases whose go.mod builds
// with `go install` (v1.4.0 is from 2019); this pseudo-version is main of
// 2026-01-22, whose go.mod has no replace directive, so plain
// `go install module/src/service_cmd@version` builds it from the module
// proxy. Nothing of it is vendored or committed.
const (
	RatelimitModule  = "github.com/envoyproxy/ratelimit"
	RatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

var installMu sync.Mutex

// RatelimitBinary returns envoyproxy/ratelimit's service_cmd, installed
// with `go install` into a cache directory on first use (about a minute of
// compiling; later calls reuse it): $SLUICE_RATELIMIT_CACHE, else the user
// cache directory's sluice/ratelimit-<version>. It needs the go command
// and the module proxy (GOPROXY, GOFLAGS=-mod=mod is not needed).
func RatelimitBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := ratelimitPath()
	if err != nil {
		tb.Fatal(err)
	}
	dir := filepath.Dir(bin)
	installMu.Lock()
	defer installMu.Unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	// Test binaries of several packages run at once (go test ./...): a
	// file lock makes one of them install while the others wait.
	unlock, err := lockDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := goInstallRatelimit(dir, bin); err != nil {
		tb.Fatal(err)
	}
	return bin
}

// goInstallRatelimit installs into a temporary GOBIN and renames the
// binary into place, so that bin is never seen half written.
func goInstallRatelimit(dir, bin string) error {
	tmp, err := os.MkdirTemp(dir, "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// go test puts its own GOROOT/bin first in PATH: this is the
	// toolchain that runs the tests.
	cmd := exec.Command("go", "install", RatelimitModule+"/src/service_cmd@"+RatelimitVersion)
	// GOFLAGS from the environment could carry -mod=vendor or the like,
	// meant for this module; the install is of another one.
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install %s/src/service_cmd@%s: %v\n%s", RatelimitModule, RatelimitVersion, err, out)
	}
	return os.Rename(filepath.Join(tmp, "service_cmd"), bin)
}

// lockDir takes an exclusive file lock in dir (created if need be),
// waiting for it; the returned function releases it.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

func ratelimitPath() (string, error) {
	dir := os.Getenv("SLUICE_RATELIMIT_CACHE")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory for envoyproxy/ratelimit: %w (set SLUICE_RATELIMIT_CACHE)", err)
		}
		dir = filepath.Join(cache, "sluice", "ratelimit-"+RatelimitVersion)
	}
	return filepath.Join(dir, "service_cmd"), nil
}

// RequireRatelimit skips tb unless envoyproxy/ratelimit may be used: under
// CI=true (CI pays the one-time go install, about a minute cold), with
// SLUICE_ENVOY_RATELIMIT=1, or when the binary is already in the cache.
// Elsewhere a plain `go test ./...` should not compile another project.
func RequireRatelimit(tb testing.TB) {
	tb.Helper()
	if os.Getenv("CI") == "true" || os.Getenv("SLUICE_ENVOY_RATELIMIT") == "1" {
		return
	}
	if bin, err := ratelimitPath(); err == nil {
		if _, err := os.Stat(bin); err == nil {
			return
		}
	}
	tb.Skip("envoyproxy/ratelimit is not installed: set SLUICE_ENVOY_RATELIMIT=1 to go install it (about a minute) and run this test")
}

// RatelimitYAML is an envoyproxy/ratelimit configuration for domain
// "sluice" with one limit for the protocol's descriptors of rule: perUnit
// per unit ("second", "minute", ...) per sluice_id.
func RatelimitYAML(rule, unit string, perUnit int) string {
	return fmt.Sprintf(`domain: sluice
descriptors:
  - key: sluice_rule
    value: %s
    descriptors:
      - key: sluice_id
        rate_limit:
          unit: %s
          requests_per_unit: %d
`, rule, unit, perUnit)
}

// Ratelimit is a running envoyproxy/ratelimit.
type Ratelimit struct {
	GRPCAddr string // the RateLimitService (h2c)
	HTTPAddr string // its /json and /healthcheck endpoints
}

// StartRatelimit runs envoyproxy/ratelimit against the standalone Redis at
// redisAddr with configYAML as its only configuration file (a "domain:"
// document, e.g. domain "sluice"), on free 127.0.0.1 ports, and waits until
// it serves. It is stopped when the test ends.
//
// The environment it gets (its settings are environment variables):
// REDIS_SOCKET_TYPE=tcp REDIS_TYPE=SINGLE REDIS_URL=<redisAddr>
// USE_STATSD=false RUNTIME_ROOT=<tmp> RUNTIME_SUBDIRECTORY=ratelimit
// RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false
// RUNTIME_IGNOREDOTFILES=true HOST/PORT, GRPC_HOST/GRPC_PORT,
// DEBUG_HOST/DEBUG_PORT on 127.0.0.1, LOG_LEVEL=warn.
func StartRatelimit(tb testing.TB, redisAddr, configYAML string) *Ratelimit {
	tb.Helper()
	bin := RatelimitBinary(tb)
	root := tb.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(configYAML), 0o644); err != nil {
		tb.Fatal(err)
	}
	grpcPort, httpPort, debugPort := FreePort(tb), FreePort(tb), FreePort(tb)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL="+redisAddr,
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting envoyproxy/ratelimit: %v", err)
	}
	tb.Cleanup(func() { stop(cmd) })
	rl := &Ratelimit{GRPCAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort)),
		HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))}
	if err := waitTCP(rl.GRPCAddr, 20*time.Second); err != nil {
		tb.Fatalf("envoyproxy/ratelimit did not listen on %s: %v\n%s", rl.GRPCAddr, err, out.String())
	}
	return rl
}

// StartRatelimitOnRedis is RequireRatelimit, then StartRatelimit on a
// new standalone Redis (StartRedis).
func StartRatelimitOnRedis(tb testing.TB, configYAML string) *Ratelimit {
	tb.Helper()
	RequireRatelimit(tb)
	return StartRatelimit(tb, StartRedis(tb).Addr, configYAML)
}

func waitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
