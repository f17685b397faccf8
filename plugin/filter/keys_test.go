package filter

import (
	"math"
	"testing"
)

func TestCeilAndWhole(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want int64
	}{{0, 0}, {-1, 0}, {0.1, 1}, {1, 1}, {1.5, 2}, {1e300, 1<<31 - 1}} {
		if got := ceilSeconds(c.in); got != c.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in   float64
		want int64
	}{{0, 0}, {-3, 0}, {2.9, 2}, {20, 20}} {
		if got := wholeTokens(c.in); got != c.want {
			t.Errorf("wholeTokens(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	if ok, _ := l.allow(logFailOpen); !ok {
		t.Fatal("first line suppressed")
	}
	for i := 0; i < 5; i++ {
		if ok, _ := l.allow(logFailOpen); ok {
			t.Fatal("repeated line not suppressed")
		}
	}
	if ok, _ := l.allow(logShadow); !ok {
		t.Fatal("kinds must be independent")
	}
	if l.suppressed[logFailOpen] != 5 {
		t.Fatalf("suppressed = %d", l.suppressed[logFailOpen])
	}
}

// TestRequestSourcesGenerations: a new request makes every cached value
// unread by counting (requestSources.reset), and when the count wraps the
// caches are cleared, so a value stamped four billion requests ago cannot
// pass for this request's.
func TestRequestSourcesGenerations(t *testing.T) {
	cfg := &compiledConfig{headerNames: []string{"x-api-key"}, metaPaths: []string{"metadata\x00filter_metadata\x00ns\x00k"}}
	var rs requestSources
	rs.reset(cfg, 0)
	rs.headers[0] = cachedValue{v: "k", state: present, gen: rs.gen}
	rs.ip = cachedValue{v: "10.0.0.1", state: present, gen: rs.gen}
	first := rs.gen
	rs.reset(cfg, 0)
	if rs.gen == first || rs.headers[0].gen == rs.gen || rs.ip.gen == rs.gen {
		t.Fatalf("after reset: gen %d, header gen %d, ip gen %d", rs.gen, rs.headers[0].gen, rs.ip.gen)
	}
	rs.headers[0] = cachedValue{v: "old", state: present, gen: 1}
	rs.gen = math.MaxUint32
	rs.reset(cfg, 0)
	if rs.gen != 1 || rs.headers[0] != (cachedValue{}) {
		t.Fatalf("after the count wrapped: gen %d, header %+v", rs.gen, rs.headers[0])
	}
	// The first request under a new configuration counts from 1 again: no
	// value the previous configuration's first request read may pass for
	// its own.
	rs.reset(cfg, 0)
	old := cachedValue{v: "old", state: present, gen: 1}
	rs.ip, rs.host, rs.peer.c, rs.route.c, rs.cluster.c, rs.conn.c, rs.metas[0].c = old, old, old, old, old, old, old
	other := &compiledConfig{headerNames: []string{"a", "b"}, metaPaths: []string{"m1", "m2"}}
	rs.reset(other, 0)
	if len(rs.headers) != 2 || len(rs.metas) != 2 || rs.cfg != other || rs.gen != 1 {
		t.Fatalf("a new configuration: %d header caches, %d metadata caches, gen %d", len(rs.headers), len(rs.metas), rs.gen)
	}
	for name, c := range map[string]*cachedValue{"ip": &rs.ip, "host": &rs.host, "peer": &rs.peer.c, "route": &rs.route.c, "cluster": &rs.cluster.c, "connection": &rs.conn.c, "metadata": &rs.metas[0].c} {
		if !rs.unread(c) {
			t.Errorf("a new configuration reads the old %s %q as this request's", name, c.v)
		}
	}
}

// TestRequestSourcesDropHugeBuffers: the header-value buffer is reused from
// request to request, but not once a request's values made it huge.
func TestRequestSourcesDropHugeBuffers(t *testing.T) {
	cfg := &compiledConfig{}
	var rs requestSources
	rs.reset(cfg, 0)
	rs.vals = append(rs.vals, make([]byte, 1000)...)
	rs.reset(cfg, 0)
	if cap(rs.vals) < 1000 || len(rs.vals) != 0 {
		t.Fatalf("a small buffer was not kept for reuse: len %d cap %d", len(rs.vals), cap(rs.vals))
	}
	rs.vals = append(rs.vals, make([]byte, maxKeptValues+1)...)
	rs.reset(cfg, 0)
	if cap(rs.vals) != 0 {
		t.Fatalf("a %d-byte buffer was kept", cap(rs.vals))
	}
}
