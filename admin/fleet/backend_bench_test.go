package fleet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// BenchmarkBackends compares the two bucket backends on this machine, in
// one run: the backend work of ShouldRateLimit calls (one token per
// descriptor, never refused), from 4 goroutines per CPU, on one hot bucket
// (one descriptor per call) and spread over 100,000 buckets (1 and 32
// descriptors per call, the latter like a plugin's sync). It reports
// calls/s, descriptors/s and the 99th percentile latency of a call. PostgreSQL runs with fsync on (a durable server) and
// the admin's session settings (synchronous_commit off); postgres-sync
// adds synchronous_commit=on to the connection string (docs/fleet.md).
//
//	go test ./admin/fleet -run '^$' -bench Backends -benchtime 5s
func BenchmarkBackends(b *testing.B) {
	limit := redisgcra.Limit{Rate: 1e9, Burst: 1e9}
	backends := benchBackends(b, true)
	shapes := []struct{ keys, descriptors int }{{1, 1}, {100_000, 1}, {100_000, 32}}
	for _, be := range backends {
		for _, shape := range shapes {
			keys, n := shape.keys, shape.descriptors
			b.Run(fmt.Sprintf("backend=%s/keys=%d/descriptors=%d", be.name, keys, n), func(b *testing.B) {
				benchCalls(b, be.backend, n, func(k int64) redisgcra.Op {
					key := redisgcra.Key("bench", "api", fmt.Sprint(k%int64(keys)))
					return redisgcra.Op{Key: key, Amount: limit.Cost(1), Tau: limit.Tau()}
				})
			})
		}
	}
}

// BenchmarkBackendWindows compares the two backends on global window
// counters, as BenchmarkBackends does on buckets: one request leased per
// call (never refused: a limit no run reaches), on one hot identity and
// spread over 100,000, in a fixed window of an hour, a sliding window of an
// hour (its previous window's count read too) and a rolling window of 60
// one-minute sub-periods (the hot identity's 59 past ones leased in
// first, so that every take sums 60).
//
//	go test ./admin/fleet -run '^$' -bench BackendWindows -benchtime 3s
func BenchmarkBackendWindows(b *testing.B) {
	backends := benchBackends(b, false)
	now := time.Now()
	for _, kind := range []struct {
		name string
		w    Window
	}{
		{"fixed", Window{Limit: 1 << 50, Seconds: 3600}},
		{"sliding", Window{Limit: 1 << 50, Seconds: 3600, Sliding: true}},
		{"rolling", Window{Limit: 1 << 50, Seconds: 60, Periods: 60}},
	} {
		w := kind.w
		start, end := w.Bounds(now)
		op := func(id string, start, end time.Time) redisgcra.Op {
			return counterOp("bench", item{rule: kind.name, id: id, hits: 1}, limitOf{win: w, start: start, end: end}, now)
		}
		for _, be := range backends {
			if w.rolling() {
				past := make([]redisgcra.Op, w.Periods-1)
				for k := range past { // oldest first: a Redis take sets the hash's expiry
					back := time.Duration(len(past)-k) * time.Duration(w.Seconds) * time.Second
					past[k] = op("0", start.Add(-back), end.Add(-back))
				}
				if _, err := be.backend.Run(context.Background(), past); err != nil {
					b.Fatal(err)
				}
			}
			for _, keys := range []int64{1, 100_000} {
				b.Run(fmt.Sprintf("window=%s/backend=%s/keys=%d", kind.name, be.name, keys), func(b *testing.B) {
					benchCalls(b, be.backend, 1, func(k int64) redisgcra.Op { return op(fmt.Sprint(k%keys), start, end) })
				})
			}
		}
	}
}

type benchBackend struct {
	name    string
	backend Backend
}

// benchBackends starts a redis-server and a durable PostgreSQL server, and
// returns a backend on each (and with withSync one more on PostgreSQL with
// synchronous_commit=on).
func benchBackends(b *testing.B, withSync bool) []benchBackend {
	pg := fleettest.StartPostgres(b, fleettest.PostgresOptions{Durable: true})
	out := []benchBackend{
		{"redis", redisBackend(b, fleettest.StartRedis(b).Addr)},
		{"postgres", postgresBackend(b, pg.URL)},
	}
	if withSync {
		out = append(out, benchBackend{"postgres-sync", postgresBackend(b, pg.URL+"&synchronous_commit=on")})
	}
	return out
}

// benchCalls runs b.N calls of n ops each from 4 goroutines per CPU, the
// k-th op of the run being op(k), and reports calls/s, descriptors/s and
// the 99th percentile latency of a call.
func benchCalls(b *testing.B, backend Backend, n int, op func(k int64) redisgcra.Op) {
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		own := make([]time.Duration, 0, 1024)
		for pb.Next() {
			ops := make([]redisgcra.Op, n)
			first := next.Add(int64(n)) - int64(n)
			for i := range ops {
				ops[i] = op(first + int64(i))
			}
			t0 := time.Now()
			if _, err := backend.Run(context.Background(), ops); err != nil {
				b.Error(err)
				return
			}
			own = append(own, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, own...)
		mu.Unlock()
	})
	secs := time.Since(start).Seconds()
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(b.N)/secs, "calls/s")
	b.ReportMetric(float64(b.N*n)/secs, "descriptors/s")
}
