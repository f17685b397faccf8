package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/shared/state"
)

// BenchmarkShouldRateLimit measures whole ShouldRateLimit calls: a gRPC
// client of the generated types, HTTP/2 cleartext over loopback, the
// server, one pipelined Redis batch on a real redis-server, with 1 and 32
// descriptors per call, from 4 goroutines per CPU. It reports calls/s and
// descriptors/s; compare the two sizes within one run (docs/benchmarks.md).
func BenchmarkShouldRateLimit(b *testing.B) {
	r := fleettest.StartRedis(b)
	rules := &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 1e9, Burst: 1e9}}}
	s := startRLS(b, Options{Backend: redisBackend(b, r.Addr), Rules: rules, Timeout: time.Second})
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) {
			var worker atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				w := worker.Add(1)
				req := &rlsv3.RateLimitRequest{Domain: "sluice"}
				for i := range n {
					req.Descriptors = append(req.Descriptors, desc("api", fmt.Sprintf("w%d-%d", w, i), 1, false))
				}
				for pb.Next() {
					resp, err := s.client.ShouldRateLimit(context.Background(), req)
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("%v %v", resp, err)
						return
					}
				}
			})
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/secs, "calls/s")
			b.ReportMetric(float64(b.N*n)/secs, "descriptors/s")
		})
	}
}

// BenchmarkOverrideLookup measures what a global rule's overrides add to
// a call: whole ShouldRateLimit calls of 32 descriptors (half of them
// overridden identities) on a backend that grants without I/O, against a
// policy whose rule has 10,000 overrides and the same policy without
// them. Compare the two within one run (docs/benchmarks.md).
func BenchmarkOverrideLookup(b *testing.B) {
	const n = 32
	for _, overrides := range []int{0, 10000} {
		b.Run(fmt.Sprintf("overrides=%d", overrides), func(b *testing.B) {
			var doc strings.Builder
			doc.WriteString(`{"fleet": {"cluster": "rls"}, "rules": [{"name": "api", "scope": "global", "limit_keys": ["header:x-api-key"],
			  "algorithm": "token_bucket", "algorithm_config": {"rps": 1e9, "burst": 1e9}, "overrides": [`)
			for i := range overrides {
				if i > 0 {
					doc.WriteByte(',')
				}
				fmt.Fprintf(&doc, `{"key": "customer-%d", "algorithm_config": {"burst": 2e9}}`, i)
			}
			doc.WriteString(`]}]}`)
			rules := &PolicyRules{}
			rules.Set(1, []byte(strings.Replace(doc.String(), `, "overrides": []`, "", 1)))
			s := startRLS(b, Options{Backend: &fakeBackend{}, Rules: rules, Timeout: time.Second})
			req := &rlsv3.RateLimitRequest{Domain: "sluice"}
			for i := range n {
				key := fmt.Sprintf("customer-%d", i*300) // an override's key when i is even
				if i%2 == 1 {
					key = fmt.Sprintf("visitor-%d", i)
				}
				req.Descriptors = append(req.Descriptors, desc("api", state.SluiceIDOfKey(key), 1, false))
			}
			b.ResetTimer()
			for b.Loop() {
				resp, err := s.client.ShouldRateLimit(context.Background(), req)
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
					b.Fatalf("%v %v", resp, err)
				}
			}
		})
	}
}

// BenchmarkBlockAheadOfAsk measures what a block costs a request-path ask
// of a rule with block_seconds: whole ShouldRateLimit calls on a real
// redis-server, the block then the ask of one identity, against the ask
// alone, from 4 goroutines per CPU. The bucket can pay, so the block
// changes nothing, as for every ask but a refused client's. Compare the
// two within one run (docs/benchmarks.md).
func BenchmarkBlockAheadOfAsk(b *testing.B) {
	r := fleettest.StartRedis(b)
	rules := &PolicyRules{}
	rules.Set(1, []byte(`{"fleet": {"cluster": "rls"}, "rules": [{"name": "api", "scope": "global", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 1e9, "burst": 1e9, "block_seconds": 600}}]}`))
	s := startRLS(b, Options{Backend: redisBackend(b, r.Addr), Rules: rules, Timeout: time.Second})
	for _, block := range []bool{false, true} {
		b.Run(fmt.Sprintf("block=%v", block), func(b *testing.B) {
			var worker atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				id := fmt.Sprintf("w%d", worker.Add(1))
				req := &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", id, 1, false)}}
				if block {
					req.Descriptors = append([]*ratelimitv3.RateLimitDescriptor{blockDesc("api", id, 1)}, req.Descriptors...)
				}
				for pb.Next() {
					resp, err := s.client.ShouldRateLimit(context.Background(), req)
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("%v %v", resp, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}
