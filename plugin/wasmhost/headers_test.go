package wasmhost

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestHeaderMapSemantics(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	vm := h.VM(0)
	dup := []Header{{"x-dup", "one"}, {"X-Dup", "two"}, {"x-other", "o"}}

	// get returns the first value; names are case-insensitive.
	if got := results(t, vm, "hget x-dup;hget X-DUP;hget missing", dup...); fmt.Sprint(got) != "[one one err:NotFound]" {
		t.Fatalf("get: %v", got)
	}

	// replace updates the first entry only.
	res := run(t, vm, "hrep X-Dup new", dup...)
	if got := headerValues(res.UpstreamHeaders, "x-dup"); fmt.Sprint(got) != "[new two]" {
		t.Fatalf("replace: x-dup = %v, want [new two]", got)
	}
	// replace of a missing header adds it.
	res = run(t, vm, "hrep x-new v")
	if got := headerValues(res.UpstreamHeaders, "x-new"); fmt.Sprint(got) != "[v]" {
		t.Fatalf("replace missing: %v", got)
	}

	// remove removes every entry.
	res = run(t, vm, "hdel X-DUP", dup...)
	if got := headerValues(res.UpstreamHeaders, "x-dup"); len(got) != 0 {
		t.Fatalf("remove: x-dup = %v", got)
	}
	if _, ok := header(res.UpstreamHeaders, "x-other"); !ok {
		t.Fatal("remove removed another header")
	}

	// add appends and lower-cases the name.
	res = run(t, vm, "hadd X-Added A;hadd x-added B", dup...)
	if got := headerValues(res.UpstreamHeaders, "x-added"); fmt.Sprint(got) != "[A B]" {
		t.Fatalf("add: %v (headers %v)", got, res.UpstreamHeaders)
	}
	for _, kv := range res.UpstreamHeaders {
		if kv[0] != strings.ToLower(kv[0]) {
			t.Fatalf("upper-case header name %q", kv[0])
		}
	}

	// pairs: get returns everything in order (defaults filled in first);
	// set replaces the whole map.
	got := one(t, vm, "hpairs", Header{"x-a", "1"})
	if !strings.HasPrefix(got, ":method=GET,:path=/,:authority=localhost,:scheme=http,x-probe=hpairs,x-a=1") {
		t.Fatalf("pairs: %q", got)
	}
	// The map's bytes: pairs in order, names lower-cased, a repeated header
	// as two pairs; its size counts names and values only (Envoy's
	// HeaderMap::byteSize), not the encoding's lengths and NULs.
	raw := results(t, vm, "hset :method=GET,x-rep=1,X-Rep=22;hraw;hsize")
	want := make([]byte, pairsSize([]Header{{":method", "GET"}, {"x-rep", "1"}, {"x-rep", "22"}}))
	marshalPairs(want, []Header{{":method", "GET"}, {"x-rep", "1"}, {"x-rep", "22"}})
	if fmt.Sprint(raw) != fmt.Sprint([]string{"ok", hex.EncodeToString(want), "23"}) {
		t.Fatalf("hset, raw pairs, size = %q, want [ok %x 23]", raw, want)
	}
	res = run(t, vm, "hset :method=POST,X-Only=1")
	if res.UpstreamHeaders[0] != (Header{":method", "POST"}) || res.UpstreamHeaders[1] != (Header{"x-only", "1"}) {
		t.Fatalf("set pairs: %v", res.UpstreamHeaders)
	}

	// The response map does not exist during the request phase.
	if got := results(t, vm, "rget :status;radd x y;rrep x y;rdel x;rpairs"); fmt.Sprint(got) !=
		"[err:BadArgument err:BadArgument err:BadArgument err:BadArgument err:BadArgument]" {
		t.Fatalf("response map in the request phase: %v", got)
	}
}

func TestResponseHeaderMap(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers:         []Header{{"x-probe-resp", "rget :status;rget x-up;radd x-added 1;rrep x-up changed;hget x-probe-resp;rdel x-gone"}},
		ResponseHeaders: []Header{{":status", "201"}, {"X-Up", "u"}, {"x-gone", "1"}, {"x-gone", "2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rr := resultsOf(res.ResponseHeaders, "x-rr")
	if fmt.Sprint(rr) != "[201 u ok ok rget :status;rget x-up;radd x-added 1;rrep x-up changed;hget x-probe-resp;rdel x-gone ok]" {
		t.Fatalf("response phase results: %q", rr)
	}
	if v, _ := header(res.ResponseHeaders, "x-up"); v != "changed" {
		t.Fatalf("x-up = %q", v)
	}
	if _, ok := header(res.ResponseHeaders, "x-gone"); ok {
		t.Fatal("x-gone still there")
	}
	if res.Status != 201 || res.Rejected {
		t.Fatalf("status %d rejected %v", res.Status, res.Rejected)
	}
	// The upstream headers are the request headers as forwarded, unaffected
	// by what happens later.
	if _, ok := header(res.UpstreamHeaders, "x-probe-resp"); !ok {
		t.Fatalf("upstream headers: %v", res.UpstreamHeaders)
	}
}

// TestLocalReply: a local reply sent in on_request_headers takes effect after
// the callback, goes downstream through on_response_headers (the plugin sees
// its own reply there), and only one is allowed per stream.
func TestLocalReply(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res, err := h.VM(0).HTTP(context.Background(), &Request{Headers: []Header{
		{"x-probe", "reply 429 X-Limit=10,retry-after=3 slow_down;reply 500 _ again;hadd x-after-reply yes"},
		{"x-probe-resp", "rget :status;rget x-limit;rget content-length;rget content-type;radd x-seen yes"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Rejected || res.Status != 429 || res.Local == nil || res.UpstreamHeaders != nil {
		t.Fatalf("result %+v", res)
	}
	l := res.Local
	if l.Status != 429 || string(l.Body) != "slow_down" || !slices.Equal(l.Headers, []Header{{"x-limit", "10"}, {"retry-after", "3"}}) || l.GRPCStatus != -1 {
		t.Fatalf("local response %+v", l)
	}
	// on_response_headers ran on the reply: its results are in the final headers.
	rr := resultsOf(res.ResponseHeaders, "x-rr")
	if fmt.Sprint(rr) != "[429 10 9 text/plain ok]" {
		t.Fatalf("on_response_headers on the local reply saw %q; final headers %v", rr, res.ResponseHeaders)
	}
	want := []Header{{":status", "429"}, {"x-limit", "10"}, {"retry-after", "3"}, {"content-length", "9"}, {"content-type", "text/plain"}}
	if !slices.Equal(res.ResponseHeaders[:5], want) {
		t.Fatalf("reply headers %v", res.ResponseHeaders)
	}
	// The second local reply was refused.
	st, err := h.VM(0).NewStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.RequestHeaders([]Header{{"x-probe", "reply 403 _ no;reply 500 _ again"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(resultsOf(r.Headers, "x-r")) != "[ok err:BadArgument]" {
		t.Fatalf("second local reply: %v", resultsOf(r.Headers, "x-r"))
	}
	if r.Local == nil || r.Local.Status != 403 || statusOf(r.ResponseHeaders) != 403 {
		t.Fatalf("stream result %+v", r)
	}
	if _, err := st.ResponseHeaders(nil, true); err == nil {
		t.Fatal("ResponseHeaders after a local reply succeeded")
	}
	if err := st.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(); err == nil {
		t.Fatal("Finish twice succeeded")
	}
}

func TestLocalReplyInResponsePhase(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers:         []Header{{"x-probe-resp", "reply 503 x-why=resp _"}},
		ResponseHeaders: []Header{{":status", "200"}, {"x-up", "1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Rejected || res.Status != 503 || res.UpstreamHeaders == nil {
		t.Fatalf("result %+v", res)
	}
	if !slices.Equal(res.ResponseHeaders, []Header{{":status", "503"}, {"x-why", "resp"}}) {
		t.Fatalf("the local reply did not replace the response: %v", res.ResponseHeaders)
	}
}

func TestLocalReplyNotInLog(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	if _, err := h.VM(0).HTTP(context.Background(), &Request{Headers: []Header{{"x-probe-log", "reply 500 _ _;hadd x y;hget x-probe-log"}}}); err != nil {
		t.Fatal(err)
	}
	if l := logsContaining(h, "log-results:"); len(l) != 1 || l[0].Message != "log-results: err:BadArgument|err:BadArgument|reply 500 _ _;hadd x y;hget x-probe-log" {
		t.Fatalf("on_log: %v", l)
	}
}
