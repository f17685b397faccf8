package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/store"
)

// adminChildEnv makes the test binary an admin process: run with the
// arguments in the variable (a JSON array).
const adminChildEnv = "SLUICE_ADMIN_CHILD_ARGS"

func TestMain(m *testing.M) {
	if a := os.Getenv(adminChildEnv); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		if err := run(args, io.Discard, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const replicaToken = "admin-token-0123456789"

// replica is one admin process on the shared database.
type replica struct {
	http, xds, rls string
	cmd            *exec.Cmd
	stderr         *bytes.Buffer
}

func startReplica(t *testing.T, database string) *replica {
	t.Helper()
	port := func() string { return "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t)) }
	r := &replica{http: port(), xds: port(), rls: port(), stderr: &bytes.Buffer{}}
	return startAdminProcess(t, r, nil, "-database", database, "-rls-listen", r.rls, "-postgres-url", database)
}

// startAdminProcess runs the admin (this test binary, as a child) on r's
// HTTP and xDS addresses with more args and environment, and waits until
// it answers.
func startAdminProcess(t *testing.T, r *replica, env []string, more ...string) *replica {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(append([]string{"-data-dir", t.TempDir(), "-listen", r.http, "-xds-listen", r.xds, "-wasm-path", "ratelimit.wasm",
		"-token", replicaToken, "-telemetry-token", "telemetry-token-0123456789", "-log-level", "warn"}, more...))
	r.cmd = exec.Command(exe, "-test.run=^$")
	r.cmd.Env = append(append(os.Environ(), env...), adminChildEnv+"="+string(args))
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := r.call("GET", "/api/v1/policy", nil); code == http.StatusOK {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin on %s did not start: %s", r.http, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// call sends an API request and decodes the answer.
func (r *replica) call(method, path string, body any) (int, map[string]any) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+r.http+path, rd)
	req.Header.Set("Authorization", "Bearer "+replicaToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// save saves a policy on base: the version stored, or 409.
func (r *replica) save(base int64, n int) (int, int64) {
	code, out := r.call("POST", "/api/v1/policy", map[string]any{"base_version": base, "message": "save " + strconv.Itoa(n),
		"policy": json.RawMessage(replicaPolicy(n))})
	v, _ := out["version"].(float64)
	return code, int64(v)
}

func replicaPolicy(n int) string {
	return fmt.Sprintf(`{"mode":"enforce","rules":[{"name":"r%d","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":%d,"burst":%d}}]}`, n, n, n)
}

// watchXDS subscribes to a replica's ECDS like Envoy, ACKing every push
// (watchPushes), and sends each pushed version on the channel.
func watchXDS(t *testing.T, addr string) <-chan int64 {
	t.Helper()
	pushes := watchPushes(t, addr)
	versions := make(chan int64, 256)
	go func() {
		defer close(versions)
		for p := range pushes {
			n, _ := strconv.ParseInt(p.version, 10, 64)
			versions <- n
		}
	}()
	return versions
}

// waitVersion waits for a push of version want (or later) on versions.
func waitVersion(t *testing.T, versions <-chan int64, want int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timeout := time.After(within)
	for {
		select {
		case v, ok := <-versions:
			if !ok {
				t.Fatalf("the xDS stream ended before version %d", want)
			}
			if v >= want {
				return time.Since(start)
			}
		case <-timeout:
			t.Fatalf("version %d not pushed within %v", want, within)
		}
	}
}

// shouldRateLimit asks a replica's rate limit service about a 1-per-hour
// key.
func shouldRateLimit(t *testing.T, addr, key string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: fleet.KeyRule, Value: "adhoc"}, {Key: fleet.KeyID, Value: key}},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR},
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("the rate limit service on %s: %v", addr, err)
	}
	return resp.GetOverallCode()
}

// TestReplicasOnPostgres: two admin processes on one PostgreSQL database
// serve the same current policy: a save on either is pushed over xDS by
// both within a second, a stale base is refused on either, and their rate
// limit services share the buckets. Then one is killed with SIGKILL in
// the middle of concurrent saves on both: no acknowledged version is lost
// and the other keeps serving xDS and the rate limit service.
func TestReplicasOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and two admin processes")
	}
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	a := startReplica(t, pg.URL)
	b := startReplica(t, pg.URL)
	watchA, watchB := watchXDS(t, a.xds), watchXDS(t, b.xds)
	waitVersion(t, watchA, 1, 5*time.Second)
	waitVersion(t, watchB, 1, 5*time.Second)

	// A save on one is pushed by both, whichever saved.
	for i, pair := range [][2]*replica{{a, b}, {b, a}} {
		code, v := pair[0].save(int64(i+1), i+2)
		if code != http.StatusCreated || v != int64(i+2) {
			t.Fatalf("save on base %d: %d, version %d", i+1, code, v)
		}
		for _, w := range []<-chan int64{watchA, watchB} {
			d := waitVersion(t, w, v, 5*time.Second)
			if d > time.Second {
				t.Errorf("version %d pushed after %v, want within a second", v, d)
			}
			t.Logf("version %d pushed %v after the save returned", v, d)
		}
	}
	if code, _ := a.save(1, 9); code != http.StatusConflict {
		t.Errorf("a stale base on a replica: %d, want 409", code)
	}
	// The rate limit services share the buckets.
	if c := shouldRateLimit(t, a.rls, "k1"); c != rlsv3.RateLimitResponse_OK {
		t.Errorf("first call on a: %v", c)
	}
	if c := shouldRateLimit(t, b.rls, "k1"); c != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second call, on b: %v, want OVER_LIMIT", c)
	}

	// Concurrent saves on both; a dies with SIGKILL in the middle.
	var mu sync.Mutex
	acked := map[int64]int{} // version -> the policy it holds
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, r := range []*replica{a, b, a, b} {
		wg.Go(func() {
			for n := 100 * (w + 1); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				code, cur := r.call("GET", "/api/v1/policy", nil)
				if code != http.StatusOK {
					if r == a {
						return // killed
					}
					continue
				}
				base, _ := cur["version"].(float64)
				if code, v := r.save(int64(base), n); code == http.StatusCreated {
					mu.Lock()
					acked[v] = n
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(700 * time.Millisecond)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d saves acknowledged before and after the kill", len(acked))
	if len(acked) < 2 {
		t.Fatalf("only %d saves acknowledged", len(acked))
	}

	st, err := store.OpenPostgres(context.Background(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for v, n := range acked {
		got, err := st.Get(context.Background(), v)
		if err != nil || !strings.Contains(string(got.JSON), fmt.Sprintf(`"r%d"`, n)) {
			t.Errorf("acknowledged version %d (policy %d): %v %s", v, n, err, got.JSON)
		}
	}

	// b keeps serving: a save on it is pushed, its rate limit service answers.
	_, cur := b.call("GET", "/api/v1/policy", nil)
	base, _ := cur["version"].(float64)
	code, v := b.save(int64(base), 7)
	if code != http.StatusCreated {
		t.Fatalf("save on b after a died: %d", code)
	}
	waitVersion(t, watchB, v, 5*time.Second)
	if c := shouldRateLimit(t, b.rls, "k2"); c != rlsv3.RateLimitResponse_OK {
		t.Errorf("b's rate limit service after a died: %v", c)
	}
	if c := shouldRateLimit(t, b.rls, "k2"); c != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("b's rate limit service after a died, second call: %v", c)
	}
}
