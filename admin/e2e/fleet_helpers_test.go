package e2e

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/pggcra"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// Fleet mode end to end: Envoy-like hosts running the compiled plugin
// (plugin/wasmhost/fleethosts) call the admin's rate limit service
// (fleet.Server with the Redis GCRA backend, in-process, on a real
// listener: HTTP/2 over cleartext) through netcall; Redis is a real
// redis-server started by the test (fleettest). Everything runs on the
// real clock, because Redis decides on its own TIME.

// fleetPolicy is the plugin's configuration and the admin's policy: the
// admin reads the global rule's limit from the same document. Rule "g":
// 100 tokens/s, burst 100, per x-tenant; leases of at most 40 tokens,
// synced every 100 ms, dropped 1 s after the last grant.
func fleetPolicy(onDown string) string {
	return `{"fleet":{"cluster":"rls","timeout_ms":80,"sync_interval_ms":100,"lease_ttl_ms":1000,"lease_max":40,
	  "on_backend_down":"` + onDown + `"},
	 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"token_bucket",
	   "algorithm_config":{"tokens_per_second":100,"burst":100}}]}`
}

const (
	fleetRate, fleetBurst, fleetLeaseMax = 100.0, 100.0, 40.0
)

// adminRLS is the admin's rate limit service on a real listener, with its
// Prometheus metrics in their own registry.
type adminRLS struct {
	srv  *fleet.Server
	reg  *prometheus.Registry
	url  string // h2c://127.0.0.1:port
	kind string // of backend
}

// startAdminRLS serves the admin's RLS for the global rules of policy,
// against the standalone Redis at redisAddr, with the admin's default
// Redis budget (100 ms) and a health check every 200 ms.
func startAdminRLS(t *testing.T, redisAddr, policy string) *adminRLS {
	t.Helper()
	// go-redis logs every refused dial; the test reads the metrics instead.
	redisgcra.SetLogger(slog.New(slog.DiscardHandler))
	c, err := redisgcra.NewClient(redisgcra.ClientOptions{Addrs: []string{redisAddr}, Timeout: fleet.DefaultTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return startAdminRLSOn(t, redisgcra.New(c), fleet.BackendRedis, "redis "+redisAddr, policy)
}

// startAdminRLSPostgres serves the admin's RLS for the global rules of
// policy on a PostgreSQL server of its own, with the admin's default budget
// and session settings; stop stops the server.
func startAdminRLSPostgres(t *testing.T, policy string) (rls *adminRLS, stop func()) {
	t.Helper()
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := pggcra.Open(ctx, pggcra.Options{URL: pg.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return startAdminRLSOn(t, b, fleet.BackendPostgres, "postgres", policy), pg.Stop
}

// fleetBackends are the backends the fleet tests run against: each starts
// the admin's RLS for policy on a new server of its own, and returns a
// function that kills that server.
var fleetBackends = []struct {
	name  string
	start func(t *testing.T, policy string) (rls *adminRLS, kill func())
}{
	{"redis", func(t *testing.T, policy string) (*adminRLS, func()) {
		r := fleettest.StartRedis(t)
		return startAdminRLS(t, r.Addr, policy), r.Kill
	}},
	{"postgres", startAdminRLSPostgres},
}

// startAdminRLSOn is startAdminRLS on any backend of kind kind.
func startAdminRLSOn(t *testing.T, backend fleet.Backend, kind, name, policy string) *adminRLS {
	t.Helper()
	rules := &fleet.PolicyRules{}
	rules.Set(1, []byte(policy))
	srv := fleet.NewServer(fleet.Options{Backend: backend, Rules: rules, BackendName: name, Metrics: fleet.NewMetricsFor(kind)})
	reg := prometheus.NewRegistry()
	if err := srv.Metrics().Register(reg, srv); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, 200*time.Millisecond) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &adminRLS{srv: srv, reg: reg, url: "h2c://" + lis.Addr().String(), kind: kind}
}

// metric reads one sample of the admin's Prometheus metrics: the counter
// or gauge name with exactly these label values (name=value pairs); 0 if
// absent.
func (a *adminRLS) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return sample(families, name, labels...)
}

// sample is the value of the counter or gauge name with exactly these label
// values (name=value pairs) in families; 0 if absent.
func sample(families []*dto.MetricFamily, name string, labels ...string) float64 {
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, kv []string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if have[kv[i]] != kv[i+1] {
			return false
		}
	}
	return len(have) == len(kv)/2
}

// skewedLoad is the offer per 20 ms of each (host, VM): host 0 sends 5
// requests, host 1 two, host 2 one, 400 requests/s in all, four times the
// limit of rule "g".
var skewedLoad = map[[2]int]int{{0, 0}: 3, {0, 1}: 2, {1, 0}: 1, {1, 1}: 1, {2, 1}: 1}

// loadResult is what one run of load admitted.
type loadResult struct {
	admitted int
	perHost  []int
	offered  int
	elapsed  time.Duration // from the first request sent to the last decided
}

// runLoad offers skewedLoad for tenant on the real clock for d:
// one goroutine per (host, VM), like Envoy's worker threads, each sending
// its requests every 20 ms (a request paused for a lease holds its worker,
// as it holds its stream in Envoy).
func runLoad(f *fleethosts.Fleet, tenant string, d time.Duration) loadResult {
	return offerLoad(skewedLoad, len(f.Hosts), d, func(host, vm int) bool { return f.Request(host, vm, tenant) })
}

// offerLoad offers load (requests per 20 ms of each (host, worker)) to
// the hosts below hosts for d on the real clock: one goroutine per (host,
// worker), each sending its requests one after the other every 20 ms.
// request sends one and says whether it was admitted.
func offerLoad(load map[[2]int]int, hosts int, d time.Duration, request func(host, worker int) bool) loadResult {
	perHost := make([]atomic.Int64, hosts)
	var offered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for hv, n := range load {
		if hv[0] >= hosts {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				for range n {
					offered.Add(1)
					if request(hv[0], hv[1]) {
						perHost[hv[0]].Add(1)
					}
				}
				if time.Since(start) >= d {
					return // elapsed ends at the last decision, not a tick later
				}
				<-tick.C
			}
		}()
	}
	wg.Wait()
	r := loadResult{elapsed: time.Since(start), offered: int(offered.Load())}
	for i := range perHost {
		n := int(perHost[i].Load())
		r.perHost = append(r.perHost, n)
		r.admitted += n
	}
	return r
}
