package telemetry

import (
	"testing"
	"time"
)

// FuzzIngest: any report the shared decoder accepts can be ingested, and
// ingesting it twice (the second is a duplicate) keeps the state within its
// bounds. The decoder itself is fuzzed in shared/telemetry (FuzzDecode).
func FuzzIngest(f *testing.F) {
	f.Add([]byte(`{"v":1,"node":"n","vm":"a","vm_start_ms":1,"seq":0,"sent_at_ms":2,"rules":[]}`))
	f.Add([]byte(`{"v":1,"node":"envoy-1","vm":"a1","vm_start_ms":1763770000000,"seq":3,"sent_at_ms":1763770042000,
	  "interval_ms":1000,"config_hash":"00ab","rules":[{"rule":"free","allowed":10,"rejected":2,"shadow_rejected":0,"fail_open":0,
	  "overflowed":1,"overflow_identities":3,"exempted":1,"denied":1,"overridden":2}],
	  "buckets":[{"rule":"free","identity":"ip:address=…#1","tokens":1.5,"burst":5,"last_refill":1763770041.5,"rejects":2},
	             {"rule":"free","identity":"header:x-user=u","tokens":0,"burst":3,"last_refill":1763770000,"rejects":0,"algorithm":"fixed_window"}],
	  "reports_dropped":1,"fleet":{"backend_healthy":true,"fleet_size":2,"rules":[{"rule":"free","lease_tokens":4,"pools":1,"fallback_active":false}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data)
		if err != nil {
			return
		}
		s := NewState(Options{MaxBuckets: 50})
		now := time.Unix(1763770042, 0)
		if res := s.Ingest(r, now); res != Accepted {
			t.Fatalf("first ingest: %v", res)
		}
		if res := s.Ingest(r, now); res != Duplicate {
			t.Fatalf("second ingest: %v", res)
		}
		ov := s.Overview(now.Add(time.Second), OverviewOptions{})
		if len(ov.Nodes) != 1 || ov.Stats.Buckets > 50 {
			t.Fatalf("overview: %+v", ov.Stats)
		}
	})
}
