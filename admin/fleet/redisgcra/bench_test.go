package redisgcra_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/admin/tlsfiles"
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

// BenchmarkRunSlidingWindows is BenchmarkRunWindows with global sliding
// windows: two counters read per take.
func BenchmarkRunSlidingWindows(b *testing.B) {
	now := time.Now()
	start := now.Truncate(time.Hour)
	end := start.Add(2 * time.Hour).UnixMilli()
	runOps(b, benchBuckets(b), func(w int64, i int) redisgcra.Op {
		id := fmt.Sprintf("w%d-%d", w, i)
		return redisgcra.Op{Key: redisgcra.WindowKey("sluice", "api", id, start.UnixMilli()), Counter: true,
			PrevKey: redisgcra.WindowKey("sluice", "api", id, start.Add(-time.Hour).UnixMilli()),
			Amount:  1, Limit: 1 << 50, ExpireAtMS: end, NowMS: now.UnixMilli(), StartMS: start.UnixMilli(), LengthMS: time.Hour.Milliseconds()}
	})
}

// BenchmarkRunRollingWindows is BenchmarkRunWindows with global rolling
// windows of 60 sub-periods (the most), every one holding a count: the
// script reads and sums 60 fields per take.
func BenchmarkRunRollingWindows(b *testing.B) {
	buckets := benchBuckets(b)
	const periods = 60
	cur := time.Now().Truncate(time.Minute)
	oldest := cur.Add(-(periods - 1) * time.Minute)
	end := cur.Add(periods * time.Minute).UnixMilli()
	op := func(w int64, i int, at time.Time) redisgcra.Op {
		return redisgcra.Op{Key: redisgcra.RollingKey("sluice", "api", fmt.Sprintf("w%d-%d", w, i)), Counter: true, Rolling: true,
			Amount: 1, Limit: 1 << 50, FieldMS: at.UnixMilli(), OldestMS: oldest.UnixMilli(), ExpireAtMS: end}
	}
	var fill []redisgcra.Op // every sub-period of every identity the workers use
	for w := int64(1); w <= int64(4*runtime.GOMAXPROCS(0)); w++ {
		for i := range 32 {
			for p := range periods {
				fill = append(fill, op(w, i, oldest.Add(time.Duration(p)*time.Minute)))
			}
		}
	}
	if _, err := buckets.Run(context.Background(), fill); err != nil {
		b.Fatal(err)
	}
	runOps(b, buckets, func(w int64, i int) redisgcra.Op { return op(w, i, cur) })
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

// BenchmarkRunOverTLS is BenchmarkRun over plaintext, TLS and mutual TLS,
// each on a redis-server of its own on this machine: what encryption adds
// to a call once the pool's connections are made (compare calls/s of the
// three in one run).
//
//	go test ./admin/fleet/redisgcra -run '^$' -bench RunOverTLS -benchtime 2s -count 6
func BenchmarkRunOverTLS(b *testing.B) {
	s := newTLSSetup(b)
	limit := redisgcra.Limit{Rate: 1e9, Burst: 1e9}
	op := func(w int64, i int) redisgcra.Op {
		return redisgcra.Op{Key: redisgcra.Key("sluice", "api", fmt.Sprintf("w%d-%d", w, i)), Amount: limit.Cost(1), Tau: limit.Tau()}
	}
	for _, c := range []struct {
		name  string
		start func() *fleettest.Redis
		files *tlsfiles.ClientFiles
	}{
		{"plaintext", func() *fleettest.Redis { return fleettest.StartRedis(b) }, nil},
		{"tls", func() *fleettest.Redis { return fleettest.StartRedisTLS(b, s.servers(false)) }, &tlsfiles.ClientFiles{CA: s.CAFile}},
		{"mutual-tls", func() *fleettest.Redis { return fleettest.StartRedisTLS(b, s.servers(true)) },
			&tlsfiles.ClientFiles{CA: s.CAFile, Cert: s.CertFile, Key: s.KeyFile}},
	} {
		o := redisgcra.ClientOptions{Addrs: []string{c.start().Addr}, Timeout: time.Second}
		if c.files != nil {
			o.TLS = client(b, *c.files)
		}
		buckets := newBenchBuckets(b, o)
		warmPool(b, buckets, op)
		b.Run("transport="+c.name, func(b *testing.B) { runOps(b, buckets, op) })
	}
}

// BenchmarkFirstCallOverTLS is a call on a new connection: dial, TLS
// handshake (ECDSA P-256 certificates, TLS 1.3) and one take, what a call
// pays after Redis restarted or the pool was emptied, against the
// -redis-timeout budget.
//
//	go test ./admin/fleet/redisgcra -run '^$' -bench FirstCallOverTLS -benchtime 400x -count 6
func BenchmarkFirstCallOverTLS(b *testing.B) {
	s := newTLSSetup(b)
	limit := redisgcra.Limit{Rate: 1e9, Burst: 1e9}
	ops := []redisgcra.Op{{Key: redisgcra.Key("sluice", "api", "first"), Amount: limit.Cost(1), Tau: limit.Tau()}}
	for _, c := range []struct {
		name  string
		addr  string
		files *tlsfiles.ClientFiles
	}{
		{"plaintext", fleettest.StartRedis(b).Addr, nil},
		{"tls", fleettest.StartRedisTLS(b, s.servers(false)).Addr, &tlsfiles.ClientFiles{CA: s.CAFile}},
		{"mutual-tls", fleettest.StartRedisTLS(b, s.servers(true)).Addr, &tlsfiles.ClientFiles{CA: s.CAFile, Cert: s.CertFile, Key: s.KeyFile}},
	} {
		o := redisgcra.ClientOptions{Addrs: []string{c.addr}, Timeout: time.Second, PoolSize: 1}
		if c.files != nil {
			o.TLS = client(b, *c.files)
		}
		b.Run("transport="+c.name, func(b *testing.B) {
			for b.Loop() {
				rc, err := redisgcra.NewClient(o)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := redisgcra.New(rc).Run(context.Background(), ops); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
	}
}

// warmPool makes the connections the benchmark's goroutines will use, so
// that handshakes are not timed: one call from each of twice as many
// goroutines as runOps runs, at once.
func warmPool(b *testing.B, buckets *redisgcra.Buckets, op func(w int64, i int) redisgcra.Op) {
	var wg sync.WaitGroup
	for w := range 8 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			if _, err := buckets.Run(context.Background(), []redisgcra.Op{op(int64(w), 0)}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
}

// benchBuckets is Buckets on a redis-server of the benchmark's own.
func benchBuckets(b *testing.B) *redisgcra.Buckets {
	r := fleettest.StartRedis(b)
	return newBenchBuckets(b, redisgcra.ClientOptions{Addrs: []string{r.Addr}, Timeout: time.Second})
}

func newBenchBuckets(b *testing.B, o redisgcra.ClientOptions) *redisgcra.Buckets {
	c, err := redisgcra.NewClient(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return redisgcra.New(c)
}
