package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

func TestFleetFlags(t *testing.T) {
	for _, k := range []string{"SLUICE_RLS_LISTEN", "SLUICE_REDIS_ADDRS", "SLUICE_REDIS_MASTER", "SLUICE_REDIS_CLUSTER", "SLUICE_REDIS_TIMEOUT", "SLUICE_REDIS_USERNAME"} {
		t.Setenv(k, "")
	}
	t.Setenv("SLUICE_REDIS_PASSWORD", "s3cret")
	o, err := parseOptions([]string{"-rls-listen", "127.0.0.1:0", "-redis-addrs", "10.0.0.1:7000, 10.0.0.2:7000,", "-redis-timeout", "50ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Redis.Addrs, "|") != "10.0.0.1:7000|10.0.0.2:7000" || o.Redis.Password != "s3cret" || o.RedisTimeout != 50*time.Millisecond {
		t.Errorf("options %+v", o.Redis)
	}
	if name := redisName(o.Redis); name != "redis cluster 10.0.0.1:7000,10.0.0.2:7000" || strings.Contains(name, "s3cret") {
		t.Errorf("redisName = %q", name)
	}
	if o, err := parseOptions(nil, io.Discard); err != nil || o.RLSListen != "" || o.RedisTimeout != fleet.DefaultTimeout {
		t.Errorf("defaults: fleet mode on or timeout %v: %v", o.RedisTimeout, err)
	}
	t.Setenv("SLUICE_REDIS_TIMEOUT", "250ms")
	if o, err := parseOptions([]string{"-rls-listen", ":1", "-redis-addrs", "r:6379"}, io.Discard); err != nil || o.RedisTimeout != 250*time.Millisecond {
		t.Errorf("SLUICE_REDIS_TIMEOUT: %v %v", o.RedisTimeout, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-rls-listen", ":1"}, "-rls-listen: needs -redis-addrs"},
		{[]string{"-redis-addrs", "r:6379"}, "set -rls-listen too"},
		{[]string{"-rls-listen", ":1", "-redis-addrs", "r:1", "-redis-master", "m", "-redis-cluster"}, "exclude each other"},
		{[]string{"-rls-listen", ":1", "-redis-addrs", "r:1", "-redis-timeout", "soon"}, "-redis-timeout"},
		{[]string{"-rls-listen", ":1", "-redis-addrs", "r:1", "-redis-timeout", "1m"}, "-redis-timeout"},
	} {
		if _, err := parseOptions(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error mentioning %q", c.args, err, c.want)
		}
	}
}

func TestPostgresFlags(t *testing.T) {
	for _, k := range []string{"SLUICE_RLS_LISTEN", "SLUICE_REDIS_ADDRS", "SLUICE_POSTGRES_URL", "SLUICE_POSTGRES_TIMEOUT"} {
		t.Setenv(k, "")
	}
	url := "postgres://sluice:s3cret@db.internal:5433/limits?sslmode=disable"
	o, err := parseOptions([]string{"-rls-listen", ":1", "-postgres-url", url, "-postgres-timeout", "70ms"}, io.Discard)
	if err != nil || o.PostgresURL != url || o.PostgresTimeout != 70*time.Millisecond {
		t.Fatalf("options %q %v: %v", o.PostgresURL, o.PostgresTimeout, err)
	}
	t.Setenv("SLUICE_POSTGRES_URL", url)
	if o, err := parseOptions([]string{"-rls-listen", ":1"}, io.Discard); err != nil || o.PostgresURL != url || o.PostgresTimeout != fleet.DefaultTimeout {
		t.Errorf("SLUICE_POSTGRES_URL: %q %v %v", o.PostgresURL, o.PostgresTimeout, err)
	}
	t.Setenv("SLUICE_POSTGRES_URL", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-rls-listen", ":1"}, "needs -redis-addrs or -postgres-url"},
		{[]string{"-postgres-url", url}, "set -rls-listen too"},
		{[]string{"-rls-listen", ":1", "-postgres-url", url, "-redis-addrs", "r:1"}, "exclude each other"},
		{[]string{"-rls-listen", ":1", "-postgres-url", url, "-postgres-timeout", "1m"}, "-postgres-timeout"},
		{[]string{"-rls-listen", ":1", "-postgres-url", "postgres://h:notaport/db"}, "-postgres-url"},
	} {
		_, err := parseOptions(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error mentioning %q", c.args, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: the error shows the password: %v", c.args, err)
		}
	}
}

// TestAdminServesTheRLS runs the admin with -rls-listen against a real
// Redis: the RLS answers over gRPC, and /metrics carries its counters.
func TestAdminServesTheRLS(t *testing.T) {
	r := fleettest.StartRedis(t)
	testAdminRLS(t, []string{"-redis-addrs", r.Addr}, "redis")
}

// TestAdminServesTheRLSOnPostgres: the same with -postgres-url; the admin
// creates the schema at start.
func TestAdminServesTheRLSOnPostgres(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	testAdminRLS(t, []string{"-postgres-url", pg.URL}, "postgres")
}

func testAdminRLS(t *testing.T, backend []string, kind string) {
	rlsAddr := "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t))
	metricsAddr := "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t))
	args := []string{"-data-dir", t.TempDir(), "-listen", "127.0.0.1:0", "-xds-listen", "off",
		"-token", "admin-token-0123456789", "-telemetry-token", "telemetry-token-0123456789",
		"-metrics-listen", metricsAddr, "-rls-listen", rlsAddr}
	args = append(args, backend...)
	done := make(chan error, 1)
	go func() { done <- run(args, io.Discard, io.Discard) }()

	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: fleet.KeyRule, Value: "adhoc"}, {Key: fleet.KeyID, Value: "x"}},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR},
	}}}
	var resp *rlsv3.RateLimitResponse
	for range 100 { // the admin is starting
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err = client.ShouldRateLimit(ctx, req)
		cancel()
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the admin's RLS does not answer: %v", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("first call: %v", resp)
	}
	if resp, err = client.ShouldRateLimit(context.Background(), req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second call of a 1/hour limit: %v %v, want OVER_LIMIT from the %s bucket", resp, err, kind)
	}
	mr, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	wants := []string{`sluice_fleet_rls_requests_total{result="over_limit"} 1`, `sluice_fleet_` + kind + `_up 1`, `sluice_fleet_tokens_total{decision="granted",rule="(other)"} 1`}
	if kind == "postgres" {
		wants = append(wants, `sluice_fleet_postgres_retries_total{reason="serialization_failure"} 0`, `sluice_fleet_postgres_cleaned_total 0`)
	}
	for _, want := range wants {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The admin stops on SIGINT (signal.NotifyContext catches it: the test
	// process lives on).
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the admin did not stop")
	}
}
