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
// one run: one ShouldRateLimit call's backend work (one descriptor, one
// token, never refused), from 4 goroutines per CPU, on one hot bucket and
// spread over 100,000 buckets. It reports calls/s and the 99th percentile
// latency of a call. PostgreSQL runs with fsync on (a durable server) and
// the admin's session settings (synchronous_commit off); postgres-sync
// adds synchronous_commit=on to the connection string (docs/fleet.md).
//
//	go test ./admin/fleet -run '^$' -bench Backends -benchtime 5s
func BenchmarkBackends(b *testing.B) {
	limit := redisgcra.Limit{Rate: 1e9, Burst: 1e9}
	pg := fleettest.StartPostgres(b, fleettest.PostgresOptions{Durable: true})
	backends := []struct {
		name    string
		backend Backend
	}{
		{"redis", redisBackend(b, fleettest.StartRedis(b).Addr)},
		{"postgres", postgresBackend(b, pg.URL, time.Second)},
		{"postgres-sync", postgresBackend(b, pg.URL+"&synchronous_commit=on", time.Second)},
	}
	for _, be := range backends {
		for _, keys := range []int{1, 100_000} {
			b.Run(fmt.Sprintf("backend=%s/keys=%d", be.name, keys), func(b *testing.B) {
				backend := be.backend
				var next atomic.Int64
				var mu sync.Mutex
				var lat []time.Duration
				b.SetParallelism(4)
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					own := make([]time.Duration, 0, 1024)
					for pb.Next() {
						key := redisgcra.Key("bench", "api", fmt.Sprint(next.Add(1)%int64(keys)))
						ops := []redisgcra.Op{{Key: key, Amount: limit.Cost(1), Tau: limit.Tau()}}
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
			})
		}
	}
}
