package helmtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// The chart's TLS to Redis starts the admin: rendered with the Secret of a
// CA and a client certificate, run with the Deployment's variables and
// the Secret's files where the pod mounts them, the admin's rate limit
// service keeps its buckets in a Redis that serves TLS only and requires
// client certificates.
func TestChartEnvironmentReachesRedisOverTLS(t *testing.T) {
	f := tlstest.WriteFiles(t, "redis")
	secret := map[string]string{"ca.crt": f.CAFile, "tls.crt": f.CertFile, "tls.key": f.KeyFile} // the Secret's keys, as cert-manager writes them
	r := fleettest.StartRedisTLS(t, fleettest.ServerTLS(f, true))
	objs, _, err := render(t, fmt.Sprintf(`
fleet: {enabled: true, redis: {addrs: %q, tls: {secretName: redis-client, clientCert: true, serverName: localhost}}}
`, r.Addr))
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	extra := map[string]string{"SLUICE_RLS_LISTEN": fmt.Sprintf("127.0.0.1:%d", fleettest.FreePort(t))}
	for name, path := range secretFiles(t, d, "redis-client") {
		local, ok := secret[filepath.Base(path)]
		if !ok {
			t.Fatalf("%s names %s, a key the Secret does not hold", name, path)
		}
		extra[name] = local
	}
	if len(extra) != 4 {
		t.Fatalf("the Deployment reads %d files of the Secret, want ca.crt, tls.crt and tls.key", len(extra)-1)
	}
	a := startPodAdmin(t, buildAdmin(t), objs, d, extra)
	if code := rlsCall(t, extra["SLUICE_RLS_LISTEN"]); code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call: %v\n%s", code, a.out)
	}
	if code := rlsCall(t, extra["SLUICE_RLS_LISTEN"]); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call of a 1/hour limit: %v, want OVER_LIMIT from the bucket in Redis\n%s", code, a.out)
	}
	if !strings.Contains(a.out.String(), "over TLS") {
		t.Errorf("the admin's start does not say it reaches Redis over TLS:\n%s", a.out)
	}
}

// secretFiles returns the variables of d that name a file of the Secret
// secretName, by the mount of the volume holding it.
func secretFiles(t *testing.T, d *appsv1.Deployment, secretName string) map[string]string {
	t.Helper()
	mount := mountOf(t, d, secretName)
	if mount == "" {
		t.Fatalf("the Secret %s is not mounted read-only", secretName)
	}
	out := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if strings.HasPrefix(e.Value, mount+"/") {
			out[e.Name] = e.Value
		}
	}
	return out
}

// rlsCall asks the rate limit service at addr for one request of a
// 1/hour limit, waiting for the admin to start, and returns the answer.
func rlsCall(t *testing.T, addr string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: fleet.KeyRule, Value: "chart"}, {Key: fleet.KeyID, Value: "x"}},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR},
	}}}
	var lastErr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		cancel()
		if err == nil {
			return resp.OverallCode
		}
		lastErr = err
	}
	t.Fatalf("the rate limit service at %s does not answer: %v", addr, lastErr)
	return 0
}

// The Redis TLS values set the admin's variables; the system's roots
// need no Secret; the values do nothing for a PostgreSQL backend.
func TestChartRedisTLSVariables(t *testing.T) {
	for _, c := range []struct {
		vals string
		want map[string]string // the Redis TLS variables
	}{
		{`fleet: {enabled: true, redis: {addrs: "r:6379", tls: {enabled: true}}}`, map[string]string{"SLUICE_REDIS_TLS": "true"}},
		{`fleet: {enabled: true, redis: {addrs: "r:6379"}}`, map[string]string{}},
		{`fleet: {enabled: true, redis: {addrs: "r:6379", tls: {secretName: s, skipNameCheck: true}}}`, map[string]string{"SLUICE_REDIS_TLS": "true",
			"SLUICE_REDIS_TLS_CA": "/etc/sluice-redis-tls/ca.crt", "SLUICE_REDIS_TLS_SKIP_NAME_CHECK": "true"}},
		{`fleet: {enabled: true, backend: postgres, postgres: {url: "postgres://db/f"}, redis: {tls: {secretName: s, clientCert: true}}}`, map[string]string{}},
	} {
		objs, _, err := render(t, c.vals)
		if err != nil {
			t.Fatalf("%s: %v", c.vals, err)
		}
		d := decode[appsv1.Deployment](t, objs["Deployment"][0])
		got := map[string]string{}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "SLUICE_REDIS_TLS") {
				got[e.Name] = e.Value
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: Redis TLS variables %v, want %v", c.vals, got, c.want)
		}
		mounted := false
		for _, v := range d.Spec.Template.Spec.Volumes {
			mounted = mounted || v.Name == "redis-tls"
		}
		if wantMount := c.want["SLUICE_REDIS_TLS_CA"] != ""; mounted != wantMount {
			t.Errorf("%s: Redis TLS volume %v, want %v", c.vals, mounted, wantMount)
		}
	}
}
