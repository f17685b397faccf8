package filter

import (
	"math"
	"testing"

	"github.com/sluice-rl/sluice/shared/limiter"
)

func TestPoolCodecRoundTrip(t *testing.T) {
	id := appendSluiceID(nil, "header:x-tenant=acme")
	if len(id) != idLen {
		t.Fatalf("sluice_id %q has %d characters", id, len(id))
	}
	for _, p := range []pool{
		{mode: modeLease, tokens: 5 * micro, stamp: 1_700_000_000_123, spent: 3, denyUntil: 0, lastSync: 1},
		{mode: modeShare, tokens: 0, stamp: -5, spent: 0, denyUntil: 99, lastSync: 0},
	} {
		gotID, got, ok := decodePool(encodePool(nil, id, p))
		if !ok || got != p || string(gotID) != string(id) {
			t.Fatalf("round trip of %+v: %+v %q %v", p, got, gotID, ok)
		}
	}
}

func TestSluiceIDDistinct(t *testing.T) {
	a := string(appendSluiceID(nil, "header:x=a"))
	b := string(appendSluiceID(nil, "header:x=b"))
	if a == b || a[:16] == b[:16] || a[16:] == b[16:] {
		t.Fatalf("ids collide: %s %s", a, b)
	}
}

func TestDecodePoolRejectsGarbage(t *testing.T) {
	id := string(appendSluiceID(nil, "k"))
	for _, v := range []string{
		"", "x", id, id + ":L", id + ":X:1:2:3:4:5", id + ":L:1:2:3:4", id + ":L:1:2:3:4:5:6",
		id + ":L:-1:2:3:4:5", id + ":L:1:2:3:4:5x", id + ":L:1234567890123456789:2:3:4:5", id + ":L::2:3:4:5",
	} {
		if _, _, ok := decodePool([]byte(v)); ok {
			t.Errorf("decodePool(%q) accepted", v)
		}
	}
}

func FuzzDecodePool(f *testing.F) {
	id := appendSluiceID(nil, "k")
	f.Add(encodePool(nil, id, pool{mode: modeLease, tokens: 7, stamp: 9}))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, v []byte) {
		gotID, p, ok := decodePool(v)
		if !ok {
			return
		}
		if again := encodePool(nil, gotID, p); string(again) != string(v) {
			// Only canonical encodings may differ (e.g. "-0", leading zeros).
			_, p2, ok2 := decodePool(again)
			if !ok2 || p2 != p {
				t.Fatalf("%q decodes to %+v, which re-encodes to %q", v, p, again)
			}
		}
	})
}

func TestDecidePool(t *testing.T) {
	env := poolEnv{nowMS: 10_000, healthy: true, down: "local_share", syncMS: 100, leaseTTL: 1000,
		share: limiter.TokenBucket{Rate: 10, Burst: 5}}
	live := pool{mode: modeLease, tokens: 3 * micro, stamp: 11_000}
	cases := []struct {
		name    string
		p       pool
		exists  bool
		healthy bool
		noFetch bool
		down    string
		want    verdict
	}{
		{"lease pays", live, true, true, false, "", vSpend},
		{"lease pays while down", live, true, false, false, "deny", vSpend},
		{"no pool, healthy: fetch", pool{}, false, true, false, "", vFetch},
		{"expired lease, healthy: fetch", pool{mode: modeLease, tokens: 9 * micro, stamp: 9_000}, true, true, false, "", vFetch},
		{"after a fetch: deny", pool{}, false, true, true, "", vDeny},
		{"refused lately", pool{mode: modeLease, stamp: 11_000, denyUntil: 10_050}, true, true, false, "", vDeny},
		{"down, allow", pool{}, false, false, false, "allow", vAllowDown},
		{"down, deny", pool{}, false, false, false, "deny", vDeny},
		{"down, share", pool{}, false, false, false, "local_share", vShare},
		{"down, share empty", pool{mode: modeShare, tokens: 0, stamp: 10_000}, true, false, false, "local_share", vShareDeny},
	}
	for _, c := range cases {
		e := env
		e.healthy, e.noFetch = c.healthy, c.noFetch
		if c.down != "" {
			e.down = c.down
		}
		next, v, _, wait := decidePool(c.p, c.exists, 1, &e)
		if v != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, v, c.want)
		}
		if (v == vDeny || v == vShareDeny) && !(wait > 0) {
			t.Errorf("%s: refusal without a wait", c.name)
		}
		if v == vSpend && (next.tokens != c.p.tokens-micro || next.spent != c.p.spent+micro) {
			t.Errorf("%s: spend gave %+v", c.name, next)
		}
	}
}

// TestSharePoolIsTheShareBucket: the local-share fallback admits burst/N at
// once and rate/N per second after, like a token bucket of that size.
func TestSharePoolIsTheShareBucket(t *testing.T) {
	env := poolEnv{nowMS: 0, down: "local_share", share: limiter.TokenBucket{Rate: 10, Burst: 5}}
	p, exists, admitted := pool{}, false, 0
	for ms := int64(0); ms < 2000; ms += 10 {
		env.nowMS = ms
		for range 3 {
			next, v, _, _ := decidePool(p, exists, 1, &env)
			if v == vShare {
				p, exists = next, true
				admitted++
			}
		}
	}
	// burst 5 + 10/s over 1.99 s
	if want := 5 + int(math.Floor(10*1.99)); admitted != want {
		t.Fatalf("admitted %d, want %d", admitted, want)
	}
}

// TestSharePoolContinuesTheReplacedShare: a new pool that replaces a
// fallback bucket starts from its level and time (refilled since, up to
// the burst); without one, or from its own lease, the share starts full.
func TestSharePoolContinuesTheReplacedShare(t *testing.T) {
	env := poolEnv{nowMS: 10_000, down: "local_share", share: limiter.TokenBucket{Rate: 10, Burst: 5}}
	cases := []struct {
		name   string
		p      pool
		exists bool
		prev   *pool
		want   int64 // micro-tokens after a request of cost 1 (within one: float rounding)
	}{
		{"free slot: full", pool{}, false, nil, 4 * micro},
		{"replaced drained share: 0.05 s of refill is too little", pool{}, false, &pool{mode: modeShare, stamp: 9_950}, -1},
		{"replaced drained share: 0.5 s of refill", pool{}, false, &pool{mode: modeShare, stamp: 9_500}, 4 * micro},
		{"replaced share, 2 tokens 0.1 s ago", pool{}, false, &pool{mode: modeShare, tokens: 2 * micro, stamp: 9_900}, 2 * micro},
		{"replaced share refilled past the burst", pool{}, false, &pool{mode: modeShare, stamp: 1_000}, 4 * micro},
		{"own expired lease: full", pool{mode: modeLease, stamp: 9_000}, true, &pool{mode: modeShare, stamp: 9_900}, 4 * micro},
	}
	for _, c := range cases {
		e := env
		if c.prev != nil {
			e.prev, e.hasPrev = *c.prev, true
		}
		next, v, _, _ := decidePool(c.p, c.exists, 1, &e)
		switch {
		case c.want < 0 && v != vShareDeny:
			t.Errorf("%s: verdict %d, want a refusal", c.name, v)
		case c.want >= 0 && (v != vShare || abs(next.tokens-c.want) > 1 || next.stamp != env.nowMS):
			t.Errorf("%s: verdict %d, pool %+v; want %d micro-tokens at %d", c.name, v, next, c.want, env.nowMS)
		}
	}
}

func abs(n int64) int64 { return max(n, -n) }
