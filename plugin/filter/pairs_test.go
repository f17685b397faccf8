package filter

import (
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// The header count that decides a one-call read counts every request
// header a source reads, once per name.
func TestConfigurationCountsTheHeadersItCanRead(t *testing.T) {
	src := func(kind policy.SourceKind, name string) policy.KeySource {
		return policy.KeySource{Kind: kind, Name: name}
	}
	for _, c := range []struct {
		name  string
		hops  int
		srcs  []policy.KeySource
		reads []string
	}{
		{"one header, asked twice in two cases", 0,
			[]policy.KeySource{src(policy.SourceHeader, "X-Api-Key"), src(policy.SourceHeader, "x-api-key")}, []string{"x-api-key"}},
		{"peer address reads no header", 0, []policy.KeySource{src(policy.SourceIP, "address")}, nil},
		{"trusted hops read x-forwarded-for", 1,
			[]policy.KeySource{src(policy.SourceIP, "address"), src(policy.SourceHeader, "x-forwarded-for")}, []string{"x-forwarded-for"}},
		{"path and query share :path", 0,
			[]policy.KeySource{src(policy.SourcePath, ""), src(policy.SourceQuery, "page")}, []string{":path"}},
		{"method, host, claims", 0,
			[]policy.KeySource{src(policy.SourceMethod, ""), src(policy.SourceHost, ""), src(policy.SourceJWT, "sub"), src(policy.SourceJWT, "plan")},
			[]string{":method", ":authority", "authorization"}},
	} {
		cc := &compiledConfig{trustedHops: c.hops}
		for _, s := range c.srcs {
			cc.ref(s)
		}
		if !slices.Equal(cc.readNames, c.reads) {
			t.Errorf("%s: reads %q, want %q", c.name, cc.readNames, c.reads)
		}
	}
}

// Every read goes to the slot of its name in readNames.
func TestConfigurationMapsEachReadToItsSlot(t *testing.T) {
	cc := &compiledConfig{}
	key := cc.ref(policy.KeySource{Kind: policy.SourceHeader, Name: "X-Api-Key"})
	cc.ref(policy.KeySource{Kind: policy.SourceMethod})
	plan := cc.ref(policy.KeySource{Kind: policy.SourceHeader, Name: "x-plan"})
	if !slices.Equal(cc.readNames, []string{"x-api-key", ":method", "x-plan"}) {
		t.Fatalf("readNames %q", cc.readNames)
	}
	if got := cc.headerRead[key.idx]; got != 1 {
		t.Errorf("x-api-key reads slot %d, want 1", got)
	}
	if got := cc.headerRead[plan.idx]; got != 3 {
		t.Errorf("x-plan reads slot %d, want 3", got)
	}
	if cc.fixedRead[fixedMethod] != 2 || cc.fixedRead[fixedPath] != 0 {
		t.Errorf("fixed slots %v, want :method in 2 and :path unread", cc.fixedRead)
	}
}

// TestHeadersAreReadWholeOnlyWhileRequestsFindSeveral: the whole map is
// read only after requests that found two or more of their headers
// present, stops being read soon after they find one, and never for a
// configuration reading one header or a request with too many headers.
func TestHeadersAreReadWholeOnlyWhileRequestsFindSeveral(t *testing.T) {
	several := &compiledConfig{readsSeveral: true}
	var rs requestSources
	// requests runs n requests that each found present headers and
	// returns how many of them were read whole.
	requests := func(cfg *compiledConfig, n, present, numHeaders int) (whole int) {
		for range n {
			rs.reset(cfg, numHeaders)
			if rs.whole == wholeUnread {
				whole++
			}
			rs.presentReads = present
		}
		return whole
	}
	if w := requests(several, 1, 2, 10); w != 0 {
		t.Fatalf("the first request was read whole with no history")
	}
	if w := requests(several, 20, 1, 10); w != 0 {
		t.Fatalf("%d of 20 requests finding one header were read whole", w)
	}
	if w := requests(several, 20, 2, 10); w < 15 {
		t.Fatalf("only %d of 20 requests finding two headers were read whole", w)
	}
	if w := requests(several, 1, 2, maxPairsHeaders+1); w != 0 {
		t.Fatalf("a request of %d headers was read whole", maxPairsHeaders+1)
	}
	if w := requests(&compiledConfig{}, 5, 3, 10); w != 0 {
		t.Fatalf("%d requests read whole for a configuration reading one header", w)
	}
	requests(several, 20, 3, 10)
	if w := requests(several, 20, 1, 10); w > 5 {
		t.Fatalf("%d of 20 requests finding one header were still read whole after a mix change", w)
	}
	if w := requests(several, 20, 0, 10); w != 0 {
		t.Fatalf("%d of 20 requests finding no header were read whole", w)
	}
}
