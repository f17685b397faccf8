package scenario

// Bounded groups under a million identities: a per-IP rule with max_keys
// 4,096 (1,024 groups of four) sees 1,000,000 distinct client addresses,
// 10,000 at an instant then 200 ms later the next 10,000 (about 10,000
// identities active at once: far more than fit). Shared data never holds
// more than the rule's 1,024 group keys plus a few fixed keys (today two:
// the creation sentinel sluice:cas-epoch and the hash seed sluice:hash-seed;
// up to two more are allowed for process-wide state), nor more bytes than
// those keys can hold; every request is decided (allowed, or a 429), none
// paused, no host error, and the rule's counters account for every request.
// Which identities are admitted once the table is full is asserted in
// bounded_overflow.go, not here.

import (
	"strconv"
	"testing"
	"time"
)

func init() {
	register(Case{Name: "BoundedGroupsMillionIdentitiesMemoryBound", Run: boundedMillionIdentities})
}

const (
	boundedIdentities = 1_000_000
	boundedChunk      = 10_000
	boundedMaxKeys    = 4096
	boundedGroups     = boundedMaxKeys / 4
	// boundedFixedKeys is what shared data may hold besides the groups.
	boundedFixedKeys = 4
	// boundedKeyBytes bounds one group key plus its value: the name
	// "tb:per-ip:#1023" and four ways of a length, a 25-byte record and an
	// IPv4 identity of at most 15 bytes, with room to spare.
	boundedKeyBytes = 256
)

// appendIPv4 appends the i-th address counting from 10.0.0.0.
func appendIPv4(b []byte, i int) []byte {
	b = strconv.AppendInt(b, int64(10+i>>24), 10)
	for _, shift := range []int{16, 8, 0} {
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(i>>shift&255), 10)
	}
	return b
}

func boundedMillionIdentities(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"response_headers": false, "rules": [{"name": "per-ip", "max_keys": 4096,
	  "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10}}]}`)
	began := time.Now()
	rs := make([]Request, boundedChunk)
	path := []Header{{":path", "/"}}
	for i := range rs {
		rs[i] = Request{Headers: path, Properties: map[string][]byte{}}
	}
	allowed, rejected := 0, 0
	var addr []byte
	for done := 0; done < boundedIdentities; done += boundedChunk {
		for i := range rs {
			addr = append(appendIPv4(addr[:0], done+i), ":40000"...)
			rs[i].Properties["source.address"] = append([]byte(nil), addr...)
		}
		for i, res := range many(t, h, 0, rs) {
			switch {
			case res.Paused:
				t.Fatalf("identity %d: paused", done+i)
			case res.Rejected && res.Status == 429:
				rejected++
			case !res.Rejected && res.Status == 200:
				allowed++
			default:
				t.Fatalf("identity %d: rejected %v with status %d", done+i, res.Rejected, res.Status)
			}
		}
		h.Advance(200 * time.Millisecond)
		if n := done + boundedChunk; n%100_000 == 0 {
			keys, bytes, err := h.SharedDataSize()
			if err != nil {
				t.Fatalf("shared data size: %v", err)
			}
			if keys > boundedGroups+boundedFixedKeys || bytes > keys*boundedKeyBytes {
				t.Fatalf("after %d identities: %d keys, %d bytes; the bound is %d group keys + %d fixed, %d bytes a key",
					n, keys, bytes, boundedGroups, boundedFixedKeys, boundedKeyBytes)
			}
			t.Logf("%7d identities: %4d keys, %6d bytes; allowed %d, rejected %d, overflowed %d", n, keys, bytes,
				allowed, rejected, metric(h, "sluice.rule.per-ip.overflowed"))
		}
	}
	if _, ok, err := h.SharedGet("sluice:cas-epoch"); err != nil || !ok {
		t.Errorf("the creation sentinel sluice:cas-epoch: present %v, %v", ok, err)
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.per-ip.allowed":   uint64(allowed),
		"sluice.rule.per-ip.rejected":  uint64(rejected),
		"sluice.rule.per-ip.fail_open": 0,
	})
	noRecoveredPanics(t, h)
	t.Logf("%d identities in %v", boundedIdentities, time.Since(began).Round(time.Millisecond))
}
