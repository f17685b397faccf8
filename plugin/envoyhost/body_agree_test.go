package envoyhost_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
)

func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }

// bodyExchanges run the probe module (plugin/wasmhost/testdata/probe) over
// a chunked response body: its x-probe-body commands run in each
// on_response_body and it logs what it saw (the callback's size and
// end_of_stream, the chunk's bytes as the SDK and the raw ABI read them),
// on_response_trailers and on_log. Each host must show the guest exactly
// want, and both hosts the same answer.
var bodyExchanges = []struct {
	name     string
	req      scenario.Request
	want     []string // the probe's body, trailer and on_log lines
	wantBody string   // what went downstream
	complete bool     // the request holds its upstream: the body comes with Stream.Complete
}{
	{
		name: "chunks with binary bytes and an empty last chunk",
		req: scenario.Request{
			Headers: []scenario.Header{
				{"x-probe-body", "body; bodystatus; body 2 3; bodyraw 9 100; bodyraw 100 1; bodyraw 0 0; bodyset x"},
				{"x-probe-log", "bodystatus; bodyraw 0 4"},
			},
			ResponseBody: [][]byte{[]byte("data: one\n\n"), []byte("\x00\xff\r\n% bin\x00"), {}},
		},
		want: []string{
			"body-results: chunk=1 size=11 eos=false: hex:" + hexOf("data: one\n\n") + "|st=0 length=11 flags=0|hex:" +
				hexOf("ta:") + "|st=0 ptr=set size=2 data=" + hexOf("\n\n") + "|st=0 ptr=null size=0|st=0 ptr=null size=0|err:Unimplemented",
			"body-results: chunk=2 size=10 eos=false: hex:" + hexOf("\x00\xff\r\n% bin\x00") + "|st=0 length=10 flags=0|hex:" +
				hexOf("\r\n%") + "|st=0 ptr=set size=1 data=00|st=0 ptr=null size=0|st=0 ptr=null size=0|err:Unimplemented",
			"body-results: chunk=3 size=0 eos=true: err:NotFound|st=0 length=0 flags=0|err:NotFound|" +
				"st=0 ptr=null size=0|st=0 ptr=null size=0|st=0 ptr=null size=0|err:Unimplemented",
			"log-results: st=0 length=0 flags=0|st=0 ptr=null size=0",
		},
		wantBody: "data: one\n\n\x00\xff\r\n% bin\x00",
	},
	{
		name: "chunks followed by trailers",
		req: scenario.Request{
			Headers:          []scenario.Header{{"x-probe-body", "body"}, {"x-probe-log", "rget :status"}},
			ResponseBody:     [][]byte{[]byte("a"), []byte("b")},
			ResponseTrailers: []scenario.Header{{"x-cost", "7"}},
		},
		want: []string{"body-results: chunk=1 size=1 eos=false: hex:61", "body-results: chunk=2 size=1 eos=false: hex:62",
			"trailers: n=1", "log-results: 200"},
		wantBody: "ab",
	},
	{
		name: "a reset after the first chunk",
		req: scenario.Request{
			Headers:              []scenario.Header{{"x-probe-body", "body"}, {"x-probe-log", "rget :status"}},
			ResponseBody:         [][]byte{[]byte("first"), []byte("second")},
			ResponseTrailers:     []scenario.Header{{"x-cost", "7"}},
			ResetAfterBodyChunks: 1,
		},
		want:     []string{"body-results: chunk=1 size=5 eos=false: hex:" + hexOf("first"), "log-results: 200"},
		wantBody: "first",
	},
	{
		name: "a local reply from on_response_headers",
		req: scenario.Request{
			Headers: []scenario.Header{{"x-probe-body", "body"}, {"x-probe-resp", "reply 503 _ over"},
				{"x-probe-log", "rget :status"}},
			ResponseBody: [][]byte{[]byte("a"), []byte("b")},
		},
		want: []string{"log-results: 503"},
	},
	{
		name: "a local reply from on_response_body",
		req: scenario.Request{
			Headers:      []scenario.Header{{"x-probe-body", "body; reply 500 _ late"}, {"x-probe-log", "rget :status"}},
			ResponseBody: [][]byte{[]byte("a"), []byte("b")},
		},
		want: []string{"body-results: chunk=1 size=1 eos=false: hex:61|ok", "log-results: 200"},
	},
	{
		name: "no body",
		req: scenario.Request{
			Headers: []scenario.Header{{"x-probe-body", "body"}, {"x-probe-log", "bodystatus"}},
		},
		want: []string{"log-results: st=0 length=0 flags=0"},
	},
	{
		name: "a held upstream answering with a body",
		req: scenario.Request{
			Headers:          []scenario.Header{{"x-probe-body", "body"}},
			ResponseBody:     [][]byte{[]byte("x"), []byte("y")},
			ResponseTrailers: []scenario.Header{{"x-cost", "1"}},
			HoldUpstream:     true,
		},
		want:     []string{"body-results: chunk=1 size=1 eos=false: hex:78", "body-results: chunk=2 size=1 eos=false: hex:79", "trailers: n=1"},
		wantBody: "xy",
		complete: true,
	},
}

// bodyLines are a host's probe lines about the body (without envoyhost's
// "vm N [level] " prefix).
func bodyLines(h scenario.Host) []string {
	var out []string
	for _, l := range h.Logs() {
		if strings.HasPrefix(l, "vm ") {
			if _, rest, ok := strings.Cut(l, "] "); ok {
				l = rest
			}
		}
		for _, p := range []string{"body-results:", "trailers:", "log-results:"} {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
			}
		}
	}
	return out
}

func TestResponseBodyExchangesAgreeWithWasmhost(t *testing.T) {
	probePath := module(t, "./plugin/wasmhost/testdata/probe")
	for _, mode := range envoyhost.Modes {
		for _, x := range bodyExchanges {
			t.Run(string(mode)+"/"+x.name, func(t *testing.T) {
				var got [2]string
				for i, start := range []scenario.Starter{envoyhost.Starter(mode), scenario.Wasmhost()} {
					h, err := start(t, scenario.Options{WasmPath: probePath, Start: t0})
					if err != nil {
						t.Fatal(err)
					}
					res, err := h.HTTP(0, x.req)
					if err != nil {
						t.Fatalf("%s: %v", h.Name(), err)
					}
					if x.complete {
						if res.Stream == nil || !res.Stream.Settled() {
							t.Fatalf("%s: the request did not hold its upstream: %+v", h.Name(), res)
						}
						if res, err = res.Stream.Complete(); err != nil {
							t.Fatalf("%s: %v", h.Name(), err)
						}
					}
					lines := bodyLines(h)
					if strings.Join(lines, "\n") != strings.Join(x.want, "\n") {
						t.Errorf("%s: the guest saw\n  %s\nwant\n  %s", h.Name(), strings.Join(lines, "\n  "), strings.Join(x.want, "\n  "))
					}
					if string(res.ResponseBody) != x.wantBody {
						t.Errorf("%s: downstream body %q, want %q", h.Name(), res.ResponseBody, x.wantBody)
					}
					got[i] = answerText(res) + fmt.Sprintf(" downstream=%q\n", res.ResponseBody) + strings.Join(lines, "\n")
				}
				if got[0] != got[1] {
					t.Errorf("Envoy's host and wasmhost differ:\n envoyhost: %s\n wasmhost:  %s", got[0], got[1])
				}
			})
		}
	}
}

// TestBufferingTheResponseBodyIsRefusedByBothHosts: a guest returning
// Pause from on_response_body (Envoy would buffer the body) is a host
// error, not a silent Continue.
func TestBufferingTheResponseBodyIsRefusedByBothHosts(t *testing.T) {
	probePath := module(t, "./plugin/wasmhost/testdata/probe")
	req := scenario.Request{Headers: []scenario.Header{{"x-probe-body", "bodypause"}}, ResponseBody: [][]byte{[]byte("a"), []byte("b")}}
	for _, mode := range envoyhost.Modes {
		t.Run(string(mode), func(t *testing.T) {
			for _, start := range []scenario.Starter{envoyhost.Starter(mode), scenario.Wasmhost()} {
				h, err := start(t, scenario.Options{WasmPath: probePath, Start: t0})
				if err != nil {
					t.Fatal(err)
				}
				_, err = h.HTTP(0, req)
				if err == nil || !strings.Contains(err.Error(), "StopIterationAndBuffer") ||
					!strings.Contains(err.Error(), "not supported by this test host") {
					t.Errorf("%s: got %v, want an error naming StopIterationAndBuffer as not supported", h.Name(), err)
				}
			}
		})
	}
}
