package redisgcra_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// BenchmarkRun is the Redis part of a ShouldRateLimit call alone: one
// pipelined batch of 1 or 32 script calls on a real redis-server, from 4
// goroutines per CPU (compare with fleet's BenchmarkShouldRateLimit).
func BenchmarkRun(b *testing.B) {
	buckets := benchBuckets(b)
	limit := redisgcra.Limit{Rate: 1e9, Burst: 1e9}
	runOps(b, buckets, func(w int64, i int) redisgcra.Op {
		return redisgcra.Op{Key: redisgcra.Key("sluice", "api", fmt.Sprintf("w%d-%d", w, i)), Amount: limit.Cost(1), Tau: limit.Tau()}
	})
}

// BenchmarkRunWindows is BenchmarkRun with window counters (global fixed
// windows and quotas) instead of GCRA buckets.
func BenchmarkRunWindows(b *testing.B) {
	end := time.Now().Add(time.Hour).UnixMilli()
	runOps(b, benchBuckets(b), func(w int64, i int) redisgcra.Op {
		return redisgcra.Op{Key: redisgcra.WindowKey("sluice", "api", fmt.Sprintf("w%d-%d", w, i), 0), Counter: true,
			Amount: 1, Limit: 1 << 50, ExpireAtMS: end}
	})
}

// runOps runs batches of 1 and 32 ops (op(worker, i)) from 4 goroutines
// per CPU and reports calls and ops per second.
func runOps(b *testing.B, buckets *redisgcra.Buckets, op func(w int64, i int) redisgcra.Op) {
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			var worker atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				w := worker.Add(1)
				ops := make([]redisgcra.Op, n)
				for i := range ops {
					ops[i] = op(w, i)
				}
				for pb.Next() {
					if _, err := buckets.Run(context.Background(), ops); err != nil {
						b.Error(err)
						return
					}
				}
			})
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/secs, "calls/s")
			b.ReportMetric(float64(b.N*n)/secs, "ops/s")
		})
	}
}

// benchBuckets is Buckets on a redis-server of the benchmark's own.
func benchBuckets(b *testing.B) *redisgcra.Buckets {
	r := fleettest.StartRedis(b)
	c, err := redisgcra.NewClient(redisgcra.ClientOptions{Addrs: []string{r.Addr}, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return redisgcra.New(c)
}
