package scenario

// The guest's garbage collector under load: a million requests with the VM
// environment forcing collections (GOGC=1: a collection whenever the heap
// grows by 1%). One request in 2,000 has a 66,000-byte key, which allocates
// a fresh header buffer (larger than the 64 KiB the filter keeps): about a
// collection every 15,000 requests, some 70 in the run (measured with
// GODEBUG=gctrace=1 under wazero); the telemetry reports and configuration
// updates allocate too. 2,000 identities, each sent 500 requests against a
// budget of 250 (nothing refills), the huge key one of them: every single
// decision is checked against the exact expectation, every report's
// cumulative counters against the traffic so far, and no host error may
// occur. Requests are kept cheap (one rule, short keys, no response fields)
// so the case stays quick under slower hosts.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

func init() {
	register(Case{Name: "CollectorUnderLoadEveryDecisionExact", Run: collectorUnderLoad})
}

const (
	gcRequests   = 1_000_000
	gcChunk      = 10_000
	gcIdentities = 2000
	gcBudget     = 250
)

// gcConfig is the configuration in force from chunk c on: updates at
// chunks 25, 50 and 75 change the report size, add an unused rule, raise
// and restore the burst (a burst change keeps each bucket's level, so no
// decision changes).
func gcConfig(version int) string {
	topN, burst, extra := 5, gcBudget, ""
	switch version {
	case 1:
		topN, extra = 10, `, {"name": "unused", "limit_keys": ["header:x-none"], "algorithm": "fixed_window",
		  "algorithm_config": {"limit": 1, "window_seconds": 60}}`
	case 2:
		burst = gcBudget + 100
	}
	return fmt.Sprintf(`{"response_headers": false, "legacy_headers": false,
	  "telemetry": {"cluster": "sluice_admin", "token": "t", "interval_ms": 1000, "top_n": %d},
	  "rules": [{"name": "k", "limit_keys": ["header:x-k"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.000001, "burst": %d}}%s]}`, topN, burst, extra)
}

func collectorUnderLoad(t *testing.T, start Starter) {
	config := gcConfig(0)
	h := mustStart(t, start, Options{Config: []byte(config), Env: map[string]string{"GOGC": "1"},
		Clusters: []string{"sluice_admin"}})
	began := time.Now()
	// The requests of one chunk: identities 0 to 1,999 in turn, identity 0
	// being the huge key (so it allocates once every 2,000 requests).
	huge := strings.Repeat("h", 66_000)
	rs := make([]Request, gcChunk)
	who := make([]int, gcChunk)
	for i := range rs {
		who[i] = i % gcIdentities
		key := "k" + fmt.Sprint(who[i])
		if who[i] == 0 {
			key = huge
		}
		rs[i] = Request{Headers: []Header{{"x-k", key}}}
	}
	sent := make([]int, gcIdentities)
	var allowed, rejected uint64
	reports := 0
	for chunk := 0; chunk < gcRequests/gcChunk; chunk++ {
		switch chunk {
		case 25, 50, 75:
			config = gcConfig(chunk / 25 % 3)
			if err := h.Reconfigure([]byte(config)); err != nil {
				t.Fatalf("chunk %d: Reconfigure: %v", chunk, err)
			}
		}
		for i, res := range many(t, h, 0, rs) {
			sent[who[i]]++
			if want := sent[who[i]] <= gcBudget; res.Rejected == want || res.Paused {
				t.Fatalf("chunk %d, request %d (identity %d, its request %d): rejected %v paused %v, want admitted %v",
					chunk, i, who[i], sent[who[i]], res.Rejected, res.Paused, want)
			}
			if res.Rejected {
				rejected++
			} else {
				allowed++
			}
		}
		if (chunk+1)%10 != 0 {
			continue
		}
		// A report: the VM's cumulative counters so far.
		calls := reportsByVM(t, h, time.Second)
		c, ok := calls[0]
		if !ok || len(calls) != 1 {
			t.Fatalf("chunk %d: reports %v, want one from VM 0", chunk, calls)
		}
		r := decodeReport(t, c, "sluice_admin", "/api/v1/telemetry", "t")
		if r.ConfigHash != fnv64Hex(config) {
			t.Errorf("chunk %d: report of configuration %s, want %s", chunk, r.ConfigHash, fnv64Hex(config))
		}
		got := sumCounts([]*telfmt.Report{r})["k"]
		if got.Allowed != allowed || got.Rejected != rejected {
			t.Fatalf("chunk %d: report counts %+v, want %d allowed, %d rejected", chunk, got, allowed, rejected)
		}
		respond(t, h, c, "200")
		reports++
	}
	want := uint64(gcBudget * gcIdentities) // every identity sent twice its budget
	if allowed != want {
		t.Errorf("%d admitted, want %d", allowed, want)
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.k.allowed": allowed, "sluice.rule.k.rejected": rejected, "sluice.rule.k.fail_open": 0,
		"sluice.telemetry.sent": uint64(reports), "sluice.telemetry.dropped": 0,
	})
	noRecoveredPanics(t, h)
	t.Logf("%d requests, %d reports, 3 updates in %v", gcRequests, reports, time.Since(began).Round(time.Millisecond))
}
