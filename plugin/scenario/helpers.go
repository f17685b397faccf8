package scenario

import (
	"testing"
)

// Helpers shared by the scenario files.

// mustStart starts a host and fails the test if it cannot.
func mustStart(t testing.TB, start Starter, o Options) Host {
	t.Helper()
	h, err := start(t, o)
	if err != nil {
		t.Fatalf("starting the filter: %v", err)
	}
	return h
}

// startConfig starts the filter with config on one VM.
func startConfig(t testing.TB, start Starter, config string) Host {
	t.Helper()
	return mustStart(t, start, Options{Config: []byte(config)})
}

// req builds a request from name/value pairs. The pseudo name "@ip" sets the
// source.address property (default "10.0.0.1:5555").
func req(kv ...string) Request {
	r := Request{Properties: map[string][]byte{"source.address": []byte("10.0.0.1:5555")}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "@ip" {
			r.Properties["source.address"] = []byte(kv[i+1])
			continue
		}
		r.Headers = append(r.Headers, Header{kv[i], kv[i+1]})
	}
	if header(r.Headers, ":path") == "" {
		r.Headers = append(r.Headers, Header{":path", "/"})
	}
	return r
}

// header returns the first value of name in hs ("" if absent).
func header(hs []Header, name string) string {
	for _, h := range hs {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

// do runs one stream on VM 0 and fails the test on a host error (a trap).
func do(t testing.TB, h Host, r Request) Response {
	t.Helper()
	return doOn(t, h, 0, r)
}

// doOn runs one stream on VM vm and fails the test on a host error.
func doOn(t testing.TB, h Host, vm int, r Request) Response {
	t.Helper()
	res, err := h.HTTP(vm, r)
	if err != nil {
		t.Fatalf("%s: VM %d: %v", h.Name(), vm, err)
	}
	return res
}

// admitted sends n copies of r on VM 0 and returns how many were allowed.
func admitted(t testing.TB, h Host, n int, r Request) int {
	t.Helper()
	rs := make([]Request, n)
	for i := range rs {
		rs[i] = r
	}
	res, err := h.HTTPMany(0, rs)
	if err != nil {
		t.Fatalf("%s: %v", h.Name(), err)
	}
	ok := 0
	for _, x := range res {
		if !x.Rejected {
			ok++
		}
	}
	return ok
}

// metric returns a plugin metric, 0 if it is not defined.
func metric(h Host, name string) uint64 {
	v, _ := h.Metric(name)
	return v
}
