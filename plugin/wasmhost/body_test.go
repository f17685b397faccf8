package wasmhost

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// bodyLogs returns the probe's body and trailer log lines ("body-results:
// ..." and "trailers: ..."), and its on_log line, in order.
func bodyLogs(h *Host) []string {
	var out []string
	for _, l := range h.Logs() {
		if strings.HasPrefix(l.Message, "body-results:") || strings.HasPrefix(l.Message, "trailers:") ||
			strings.HasPrefix(l.Message, "log-results:") {
			out = append(out, l.Message)
		}
	}
	return out
}

func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }

func checkLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the plugin saw\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestResponseBodyChunksReachTheGuestOneByOne: each chunk of the upstream's
// body reaches on_response_body with its own length, its own bytes (binary
// ones too) in the HttpResponseBody buffer and end_of_stream on the last;
// an empty last chunk is delivered as such; the chunks go downstream
// unchanged.
func TestResponseBodyChunksReachTheGuestOneByOne(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	chunks := []string{"data: one\n\n", "\x00\xff\r\n%bin", ""}
	res, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers:      []Header{{"x-probe-body", "body; bodystatus"}, {"x-probe-log", "ctx"}},
		ResponseBody: [][]byte{[]byte(chunks[0]), []byte(chunks[1]), []byte(chunks[2])},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || res.Rejected || string(res.ResponseBody) != chunks[0]+chunks[1] {
		t.Fatalf("status %d rejected %v body %q, want 200 and the chunks concatenated", res.Status, res.Rejected, res.ResponseBody)
	}
	logs := bodyLogs(h)
	checkLines(t, logs[:len(logs)-1], []string{
		"body-results: chunk=1 size=11 eos=false: hex:" + hexOf(chunks[0]) + "|st=0 length=11 flags=0",
		"body-results: chunk=2 size=8 eos=false: hex:" + hexOf(chunks[1]) + "|st=0 length=8 flags=0",
		"body-results: chunk=3 size=0 eos=true: err:NotFound|st=0 length=0 flags=0",
	})
	if !strings.HasPrefix(logs[len(logs)-1], "log-results:") {
		t.Errorf("last line %q, want on_log's", logs[len(logs)-1])
	}
}

// TestResponseBodyReadsAreClippedToTheChunk: proxy_get_buffer_bytes on the
// body clips the range to the current chunk as proxy-wasm-cpp-host does; a
// range past its end reads nothing (Ok, null pointer, size 0); outside
// on_response_body the buffer is empty, as in Envoy; the body cannot be
// changed.
func TestResponseBodyReadsAreClippedToTheChunk(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	_, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers: []Header{
			{"x-probe-body", "body 2 3; body 4 100; body 6; bodyraw 0 0; bodyraw 7 1; bodyraw 6 1; bodyraw 1 2; bodyset x"},
			{"x-probe-log", "bodystatus; bodyraw 0 10"},
			{"x-probe", "bodystatus"},
		},
		ResponseBody: [][]byte{[]byte("abcdef")},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, bodyLogs(h), []string{
		"body-results: chunk=1 size=6 eos=true: hex:" + hexOf("cde") + "|hex:" + hexOf("ef") + "|err:NotFound|" +
			"st=0 ptr=null size=0|st=0 ptr=null size=0|st=0 ptr=null size=0|st=0 ptr=set size=2 data=" + hexOf("bc") +
			"|err:Unimplemented",
		"log-results: st=0 length=0 flags=0|st=0 ptr=null size=0",
	})
}

// TestResponseBodyWithTrailersNeverEndsTheStream: with trailers, no body
// chunk carries end_of_stream; on_response_trailers comes after the last.
func TestResponseBodyWithTrailersNeverEndsTheStream(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers:          []Header{{"x-probe-body", "body"}},
		ResponseBody:     [][]byte{[]byte("a"), []byte("b")},
		ResponseTrailers: []Header{{"x-cost", "3"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, bodyLogs(h), []string{
		"body-results: chunk=1 size=1 eos=false: hex:61",
		"body-results: chunk=2 size=1 eos=false: hex:62",
		"trailers: n=1",
	})
	if string(res.ResponseBody) != "ab" {
		t.Errorf("downstream body %q", res.ResponseBody)
	}
}

// TestResetAfterTheFirstBodyChunkStillLogs: a stream reset after its first
// chunk delivers that chunk without end of stream, no trailers, then on_log
// and on_done.
func TestResetAfterTheFirstBodyChunkStillLogs(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers:              []Header{{"x-probe-body", "body"}, {"x-probe-log", "rget :status"}},
		ResponseBody:         [][]byte{[]byte("first"), []byte("second")},
		ResponseTrailers:     []Header{{"x-cost", "3"}},
		ResetAfterBodyChunks: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, bodyLogs(h), []string{
		"body-results: chunk=1 size=5 eos=false: hex:" + hexOf("first"),
		"log-results: 200",
	})
	if res.Status != 200 || string(res.ResponseBody) != "first" {
		t.Errorf("status %d body %q, want 200 and the first chunk", res.Status, res.ResponseBody)
	}
	if len(logsContaining(h, "stream_done")) != 1 {
		t.Errorf("on_done did not run once: %v", h.Logs())
	}
	if _, err := h.VM(0).HTTP(context.Background(), &Request{ResponseBody: [][]byte{[]byte("x")}, ResetAfterBodyChunks: 2}); err == nil {
		t.Error("a reset after more chunks than the body has was accepted")
	}
}

// TestBufferingTheResponseBodyIsRefused: a guest returning anything but
// Continue from on_response_body (Envoy would buffer) gets a clear error.
func TestBufferingTheResponseBodyIsRefused(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	_, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers:      []Header{{"x-probe-body", "bodypause"}},
		ResponseBody: [][]byte{[]byte("a"), []byte("b")},
	})
	if err == nil || !strings.Contains(err.Error(), "StopIterationAndBuffer") || !strings.Contains(err.Error(), "not supported by this test host") {
		t.Fatalf("got %v, want an error naming StopIterationAndBuffer as not supported", err)
	}
}

// TestLocalReplyStopsTheBody: a reply from on_response_headers replaces the
// response and no body callback follows; a reply from on_response_body
// comes too late to replace it: the stream is reset, the later chunks never
// reach the plugin and on_log still runs.
func TestLocalReplyStopsTheBody(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers:      []Header{{"x-probe-body", "body"}, {"x-probe-resp", "reply 503 _ over"}},
		ResponseBody: [][]byte{[]byte("a"), []byte("b")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Rejected || res.Status != 503 || res.ResponseBody != nil || len(bodyLogs(h)) != 0 {
		t.Fatalf("reply in on_response_headers: rejected %v status %d body %q, plugin saw %q", res.Rejected, res.Status, res.ResponseBody, bodyLogs(h))
	}

	h = newHost(t, Config{Clock: NewManualClock(t0)})
	res, err = h.VM(0).HTTP(context.Background(), &Request{
		Headers:      []Header{{"x-probe-body", "body; reply 500 _ late"}, {"x-probe-log", "ctx"}},
		ResponseBody: [][]byte{[]byte("a"), []byte("b")},
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := bodyLogs(h)
	if len(logs) != 2 || logs[0] != "body-results: chunk=1 size=1 eos=false: hex:61|ok" || !strings.HasPrefix(logs[1], "log-results:") {
		t.Errorf("the plugin saw %q, want the first chunk then on_log", logs)
	}
	if !res.Rejected || res.Local == nil || res.Local.Status != 500 || res.Status != 200 || res.ResponseBody != nil {
		t.Errorf("reply in on_response_body: rejected %v local %+v status %d body %q, want the reply recorded, "+
			"the upstream's status and no body", res.Rejected, res.Local, res.Status, res.ResponseBody)
	}
}

// TestStreamDeliversResponseBodyChunks: the phased API a gateway uses.
func TestStreamDeliversResponseBodyChunks(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	vm := h.VM(0)
	s, err := vm.NewStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequestHeaders([]Header{{":path", "/"}, {"x-probe-body", "body"}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResponseBody([]byte("early"), false); err == nil {
		t.Error("a body chunk before the response headers was accepted")
	}
	if _, err := s.ResponseHeaders([]Header{{":status", "200"}}, false); err != nil {
		t.Fatal(err)
	}
	for i, c := range []string{"one", "two"} {
		r, err := s.ResponseBody([]byte(c), i == 1)
		if err != nil || r.Action != ActionContinue || r.Local != nil {
			t.Fatalf("chunk %d: %+v %v", i, r, err)
		}
	}
	if _, err := s.ResponseBody([]byte("late"), true); err == nil {
		t.Error("a body chunk after end of stream was accepted")
	}
	if err := s.ResponseTrailers([]Header{{"x", "1"}}); err == nil {
		t.Error("trailers after end of stream were accepted")
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	checkLines(t, bodyLogs(h), []string{
		"body-results: chunk=1 size=3 eos=false: hex:" + hexOf("one"),
		"body-results: chunk=2 size=3 eos=true: hex:" + hexOf("two"),
	})
}

// TestCompleteDeliversTheWholeAnswer: a paused stream completed with a body
// and trailers gets them like VM.HTTP's streams.
func TestCompleteDeliversTheWholeAnswer(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=10")})
	res := run(t, h.VM(0), "pause;resume-on-tick", Header{"x-probe-body", "body"})
	clock.Advance(10 * time.Millisecond)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	final, err := res.Stream.CompleteWith(ctxTimeout(t), &Request{
		ResponseBody: [][]byte{[]byte("x"), []byte("y")}, ResponseTrailers: []Header{{"t", "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if string(final.ResponseBody) != "xy" {
		t.Errorf("body %q", final.ResponseBody)
	}
	checkLines(t, bodyLogs(h), []string{
		"body-results: chunk=1 size=1 eos=false: hex:78",
		"body-results: chunk=2 size=1 eos=false: hex:79",
		"trailers: n=1",
	})
}
