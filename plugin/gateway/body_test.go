package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// probePkg is the test module that logs what its on_response_body sees
// when a request carries x-probe-body (see its package comment).
const probePkg = "./plugin/wasmhost/testdata/probe"

// seenChunk is one on_response_body call as the probe logged it.
type seenChunk struct {
	data string
	eos  bool
}

func (c seenChunk) String() string { return fmt.Sprintf("%q eos=%v", c.data, c.eos) }

// probeSaw returns the body chunks the probe's on_response_body read (with
// the x-probe-body script "body") and its other body lines ("trailers:
// n=..."), in order.
func probeSaw(t *testing.T, gw *Gateway) (chunks []seenChunk, other []string) {
	t.Helper()
	for _, e := range gw.Host().Logs() {
		m := e.Message
		if strings.HasPrefix(m, "trailers:") {
			other = append(other, m)
		}
		rest, ok := strings.CutPrefix(m, "body-results: ")
		if !ok {
			continue
		}
		head, result, _ := strings.Cut(rest, ": ")
		c := seenChunk{eos: strings.HasSuffix(head, "eos=true")}
		if h, ok := strings.CutPrefix(result, "hex:"); ok {
			b, err := hex.DecodeString(h)
			if err != nil {
				t.Fatalf("probe line %q: %v", m, err)
			}
			c.data = string(b)
		} else if result != "err:NotFound" { // an empty chunk reads as NotFound through the SDK
			t.Fatalf("probe line %q: the chunk was not readable", m)
		}
		chunks = append(chunks, c)
	}
	return chunks, other
}

// TestGatewayStreamsServerSentEventsThroughThePlugin: an upstream sends one
// event, flushes, and sends the next only once the client has the first:
// the gateway passes each chunk through on_response_body and on to the
// client as it arrives, not once the body is complete, and the plugin sees
// every byte, end of stream on its last call only.
func TestGatewayStreamsServerSentEventsThroughThePlugin(t *testing.T) {
	const one, two = "data: one\n\n", "event: done\ndata: two\n\n"
	firstArrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, one)
		w.(http.Flusher).Flush()
		select {
		case <-firstArrived:
		case <-time.After(10 * time.Second):
			return // the gateway held the first event back
		}
		io.WriteString(w, two)
	}))
	t.Cleanup(up.Close)
	gw, _, _ := startGatewayWith(t, probePkg, up.URL, "")
	release := sync.OnceFunc(func() { close(firstArrived) })
	t.Cleanup(release) // first, should the test stop early: the upstream ends

	req, err := http.NewRequest("GET", gw.URL()+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Probe-Body", "body")
	type firstEvent struct {
		resp  *http.Response
		r     *bufio.Reader
		event string
		err   error
	}
	got := make(chan firstEvent, 1)
	go func() { // the response's headers, then its first event
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- firstEvent{err: err}
			return
		}
		f := firstEvent{resp: resp, r: bufio.NewReader(resp.Body)}
		for len(f.event) < len(one) {
			line, err := f.r.ReadString('\n')
			f.event += line
			if err != nil {
				f.err = err
				break
			}
		}
		got <- f
	}()
	var f firstEvent
	select {
	case f = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not reach the client before the upstream sent the second: the gateway holds the body back")
	}
	if f.resp != nil {
		defer f.resp.Body.Close()
	}
	if f.err != nil || f.event != one {
		t.Fatalf("first event %q (%v), want %q", f.event, f.err, one)
	}
	if f.resp.StatusCode != 200 || f.resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", f.resp.StatusCode, f.resp.Header.Get("Content-Type"))
	}
	release()
	rest, err := io.ReadAll(f.r)
	if err != nil || string(rest) != two {
		t.Fatalf("rest of the stream %q (%v), want %q", rest, err, two)
	}

	chunks, other := probeSaw(t, gw)
	if len(chunks) < 2 || chunks[0].data != one {
		t.Fatalf("the plugin saw %v, want the first event alone first", chunks)
	}
	var all strings.Builder
	for i, c := range chunks {
		all.WriteString(c.data)
		if c.eos != (i == len(chunks)-1) {
			t.Errorf("chunk %d of %d: end_of_stream %v", i+1, len(chunks), c.eos)
		}
	}
	if all.String() != one+two || len(other) != 0 {
		t.Errorf("the plugin saw %q then %q, want the whole stream %q and no trailers", all.String(), other, one+two)
	}
}

// TestGatewayBodyEndsWithTrailersOrAnEmptyLastChunk: a body followed by
// trailers never carries end of stream (on_response_trailers ends it); a
// body whose end comes after its data ends with an empty chunk carrying
// end of stream; a body of a known length ends on its last data.
func TestGatewayBodyEndsWithTrailersOrAnEmptyLastChunk(t *testing.T) {
	released := make(chan struct{}) // the end of /stream waits until the client has its data
	release := sync.OnceFunc(func() { close(released) })
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailers":
			w.Header().Set("Trailer", "X-Cost")
			io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Cost", "3")
		case "/stream":
			io.WriteString(w, "abc")
			w.(http.Flusher).Flush() // chunked: the end comes in a frame of its own
			select {
			case <-released:
			case <-time.After(10 * time.Second):
			}
		case "/sized":
			w.Header().Set("Content-Length", "3")
			io.WriteString(w, "abc")
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(release) // first, should the test stop early: the upstream ends
	for _, tc := range []struct {
		path  string
		want  []seenChunk
		other []string
	}{
		{"/trailers", []seenChunk{{"abc", false}}, []string{"trailers: n=1"}},
		{"/stream", []seenChunk{{"abc", false}, {"", true}}, nil},
		{"/sized", []seenChunk{{"abc", true}}, nil},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			gw, _, _ := startGatewayWith(t, probePkg, up.URL, "")
			req, err := http.NewRequest("GET", gw.URL()+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Probe-Body", "body")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data := make([]byte, 3)
			if _, err := io.ReadFull(resp.Body, data); err != nil {
				t.Fatal(err)
			}
			if tc.path == "/stream" {
				release()
			}
			rest, err := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(data) != "abc" || len(rest) != 0 || err != nil {
				t.Fatalf("status %d body %q%q (%v)", resp.StatusCode, data, rest, err)
			}
			if tc.path == "/trailers" && resp.Trailer.Get("X-Cost") != "3" {
				t.Errorf("trailer X-Cost %q, want 3", resp.Trailer.Get("X-Cost"))
			}
			chunks, other := probeSaw(t, gw)
			if len(chunks) != len(tc.want) || strings.Join(other, ";") != strings.Join(tc.other, ";") {
				t.Fatalf("the plugin saw %v then %q, want %v then %q", chunks, other, tc.want, tc.other)
			}
			for i := range chunks {
				if chunks[i] != tc.want[i] {
					t.Errorf("chunk %d: %v, want %v", i+1, chunks[i], tc.want[i])
				}
			}
		})
	}
}
