package netcall_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/netcall"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// h2cServer serves HTTP/2 cleartext only (prior knowledge), like a gRPC
// server without TLS; it records the protocol each request used.
func h2cServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "h2c://" + ln.Addr().String()
}

func probeHost(t *testing.T, clusters map[string]string) *wasmhost.Host {
	t.Helper()
	specs := []string{}
	for n, u := range clusters {
		specs = append(specs, n+"="+u)
	}
	cl, err := netcall.ParseClusters(specs)
	if err != nil {
		t.Fatal(err)
	}
	client := netcall.New(context.Background(), cl, nil)
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm:      wasmtest.Build(t, "./plugin/wasmhost/testdata/probe"),
		CacheDir:  wasmtest.CacheDir(t),
		HTTPCalls: client,
		Clusters:  client.Names(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// call dispatches one call from the probe plugin and returns the upstream
// headers of the resumed request.
func call(t *testing.T, h *wasmhost.Host, cluster, path string) []wasmhost.Header {
	t.Helper()
	script := "call " + cluster + " :method=POST,:path=" + path + ",:authority=rls,content-type=application/grpc,te=trailers 2000 body;pause"
	res, err := h.VM(0).HTTP(context.Background(), &wasmhost.Request{Headers: []wasmhost.Header{{"x-probe", script}}})
	if err != nil || !res.Paused {
		t.Fatalf("dispatch: %+v %v", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-res.Stream.Resumed():
	case <-ctx.Done():
		t.Fatal("not resumed")
	}
	final, err := res.Stream.Complete(ctx, []wasmhost.Header{{":status", "200"}})
	if err != nil {
		t.Fatal(err)
	}
	return final.UpstreamHeaders
}

func get(h []wasmhost.Header, name string) string {
	for _, kv := range h {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// TestH2CCallWithTrailers: a call to an h2c cluster reaches a real HTTP/2
// server over cleartext, and the guest reads the response trailers through
// the http-call-response-trailers map (proxy_get_header_map_pairs), as in
// Envoy for a gRPC answer.
func TestH2CCallWithTrailers(t *testing.T) {
	seen := make(chan string, 4)
	url := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Proto + " " + r.Host + " " + r.Header.Get("te") + " " + r.URL.Path
		switch r.URL.Path {
		case "/trailers-only":
			w.Header().Set("grpc-status", "14")
			w.Header().Set("content-type", "application/grpc")
			w.WriteHeader(200)
		default:
			w.Header().Set("content-type", "application/grpc")
			w.Header().Set("x-sluice-fleet-size", "3")
			w.Header().Set("Trailer", "grpc-status, grpc-message")
			w.WriteHeader(200)
			_, _ = w.Write([]byte("frame"))
			w.Header().Set("grpc-status", "0")
			w.Header().Set("grpc-message", "fine")
		}
	})
	h := probeHost(t, map[string]string{"rls": url})

	up := call(t, h, "rls", "/svc/Method")
	if got := <-seen; got != "HTTP/2.0 rls trailers /svc/Method" {
		t.Fatalf("server saw %q", got)
	}
	if got := get(up, "x-call"); got != "200|frame" {
		t.Fatalf("x-call = %q", got)
	}
	if got := get(up, "x-call-trailers"); got != "grpc-message=fine,grpc-status=0,|ok" {
		t.Fatalf("x-call-trailers = %q", got)
	}

	up = call(t, h, "rls", "/trailers-only")
	<-seen
	if got := get(up, "x-call"); got != "200|" {
		t.Fatalf("trailers-only x-call = %q", got)
	}
	if got := get(up, "x-call-trailers"); got != "" {
		t.Fatalf("trailers-only response has trailers %q", got)
	}
}

// TestH2CUnreachable: a refused connection delivers the failure callback.
func TestH2CUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	h := probeHost(t, map[string]string{"rls": "h2c://" + addr})
	if got := get(call(t, h, "rls", "/x"), "x-call"); got != "failed" {
		t.Fatalf("x-call = %q, want failed", got)
	}
}

func TestParseClusters(t *testing.T) {
	got, err := netcall.ParseClusters([]string{"a=h2c://127.0.0.1:1", "b=http://x"})
	if err != nil || got["a"].Scheme != "h2c" || got["b"].Host != "x" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"a=ftp://x", "=http://x", "a", "a=h2c://"} {
		if _, err := netcall.ParseClusters([]string{bad}); err == nil || !strings.Contains(err.Error(), "-cluster") {
			t.Errorf("%q accepted: %v", bad, err)
		}
	}
}
