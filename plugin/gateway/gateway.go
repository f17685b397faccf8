package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// Options configure a Gateway.
type Options struct {
	Listen         string        // address to serve on; ":0" picks a free port
	Upstream       string        // base URL of the upstream, or "demo"
	ConfigPath     string        // plugin configuration file (JSON)
	WasmPath       string        // the plugin module
	VMs            int           // worker VMs
	ReloadInterval time.Duration // how often ConfigPath is checked for changes
	DemoTraffic    int           // requests per second of generated demo traffic (0: none)

	// PauseTimeout bounds how long a request paused by the plugin waits to
	// be resumed before the gateway answers 503 (default 30s).
	PauseTimeout time.Duration

	// XDS, when set, is the admin's xDS address (host:port): the plugin
	// configuration then comes from the admin over ECDS (see xds.go), the
	// file watcher is off, and ConfigPath only bootstraps the plugin until
	// the first update arrives.
	XDS           string
	XDSResource   string        // ECDS resource name (default "sluice-ratelimit")
	NodeID        string        // node id reported to the admin (default sluice-gateway-<hostname>)
	XDSMaxBackoff time.Duration // longest wait between reconnects to the admin (default 10s)

	// Clusters the plugin may call with dispatch_http_call (name to base
	// URL), answered for real by callouts.go; a call to another name fails
	// with BadArgument, as in Envoy.
	Clusters map[string]*url.URL

	// VMEnv is the plugin VMs' environment (Envoy:
	// vm_config.environment_variables), e.g. the telemetry token of a
	// policy with telemetry.token_env. In xDS mode the environment the
	// admin pushes is added to it (see vmenv.go).
	VMEnv map[string]string
}

// Gateway serves HTTP through the plugin running in a wasmhost.Host.
type Gateway struct {
	opts     Options
	log      *slog.Logger
	cur      atomic.Pointer[hostRef] // the plugin VMs serving new requests (vmenv.go)
	hostCfg  wasmhost.Config         // how they were made, for a restart with another environment
	runCtx   context.Context
	upstream *url.URL
	client   *http.Client
	server   *http.Server
	listener net.Listener
	demo     *http.Server // built-in upstream, when Upstream is "demo"
	next     atomic.Uint64
	conns    atomic.Uint64 // connections accepted: the next one's number (connection.id)
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	retiring sync.WaitGroup // previous plugin VMs being closed (vmenv.go)

	configMu  sync.Mutex
	configSum []byte // contents of the config in force
}

// Start loads the module and configuration, starts the worker VMs, the
// ticker, the config watcher (or, with XDS, the ECDS client) and the HTTP
// server.
func Start(ctx context.Context, opts Options, logger *slog.Logger) (*Gateway, error) {
	if opts.PauseTimeout <= 0 {
		opts.PauseTimeout = 30 * time.Second
	}
	if opts.XDS != "" {
		if opts.XDSResource == "" {
			opts.XDSResource = defaultXDSResource
		}
		if opts.NodeID == "" {
			opts.NodeID = defaultNodeID()
		}
		if opts.XDSMaxBackoff <= 0 {
			opts.XDSMaxBackoff = 10 * time.Second
		}
		if err := checkXDSOptions(opts); err != nil {
			return nil, err
		}
	}
	wasm, err := os.ReadFile(opts.WasmPath)
	if err != nil {
		return nil, fmt.Errorf("reading the plugin: %w (run `make build` first, or pass -wasm)", err)
	}
	config, err := os.ReadFile(opts.ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("reading the plugin configuration: %w (pass -config)", err)
	}
	gw := &Gateway{opts: opts, log: logger, configSum: config}
	runCtx, cancel := context.WithCancel(context.Background())
	gw.cancel = cancel

	if err := gw.startUpstream(opts.Upstream); err != nil {
		cancel()
		return nil, err
	}
	callouts := NewCallouts(runCtx, opts.Clusters, logger)
	nodeID := opts.NodeID
	if nodeID == "" {
		nodeID = defaultNodeID()
	}
	gw.runCtx = runCtx
	gw.hostCfg = wasmhost.Config{
		Wasm:         wasm,
		PluginConfig: config,
		VMs:          opts.VMs,
		VMID:         "sluice",
		RootID:       "sluice",
		LogFunc:      pluginLog(logger),
		NodeID:       nodeID, // property node.id, e.g. in telemetry reports
		Clusters:     callouts.Names(),
		HTTPCalls:    callouts,
		Env:          maps.Clone(opts.VMEnv),
	}
	host, err := wasmhost.New(ctx, gw.hostCfg)
	if err != nil {
		gw.stopUpstream()
		cancel()
		return nil, fmt.Errorf("starting the plugin: %w", err)
	}
	host.StartTicker(runCtx)
	gw.cur.Store(&hostRef{host: host, env: gw.hostCfg.Env})
	gw.warnMissingClusters(config)

	gw.listener, err = net.Listen("tcp", opts.Listen)
	if err != nil {
		host.Close(ctx)
		gw.stopUpstream()
		cancel()
		return nil, fmt.Errorf("-listen %s: %w", opts.Listen, err)
	}
	// The upstream has 60 s to send its response headers, and its body
	// may take as long as it streams (an LLM's server-sent events). Envoy
	// bounds the whole response with the route's timeout (15 s unless the
	// route sets another, or 0 for streams); the development gateway bounds
	// only the wait for the headers, so streams of any length pass.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = 60 * time.Second
	gw.client = &http.Client{
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	gw.server = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second, ConnContext: gw.numberConnection}
	gw.wg.Add(2)
	go func() {
		defer gw.wg.Done()
		if err := gw.server.Serve(gw.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serve", "err", err)
		}
	}()
	go func() {
		defer gw.wg.Done()
		if opts.XDS != "" {
			gw.newXDSClient().run(runCtx)
			return
		}
		gw.watchConfig(runCtx)
	}()
	if opts.XDS != "" {
		logger.Info("gateway ready", "listen", gw.URL(), "upstream", gw.upstream.String(), "vms", opts.VMs,
			"xds", opts.XDS, "resource", opts.XDSResource, "node", opts.NodeID, "bootstrap_config", opts.ConfigPath)
	} else {
		logger.Info("gateway ready", "listen", gw.URL(), "upstream", gw.upstream.String(), "vms", opts.VMs, "config", opts.ConfigPath)
	}
	return gw, nil
}

// config returns the plugin configuration in force.
func (gw *Gateway) config() []byte {
	gw.configMu.Lock()
	defer gw.configMu.Unlock()
	return append([]byte(nil), gw.configSum...)
}

// URL is the gateway's base URL.
func (gw *Gateway) URL() string { return "http://" + gw.listener.Addr().String() }

// Host exposes the plugin host (tests read shared data and metrics from it).
func (gw *Gateway) Host() *wasmhost.Host { return gw.cur.Load().host }

// Close stops serving, then stops the VMs.
func (gw *Gateway) Close(ctx context.Context) error {
	err := gw.server.Shutdown(ctx)
	gw.cancel()
	gw.wg.Wait()
	gw.stopUpstream()
	if cerr := gw.closeHosts(ctx); err == nil {
		err = cerr
	}
	return err
}

// UpstreamCluster is the name of the cluster every request goes to, as the
// plugin reads it (xds.cluster_name): envoy.yaml's name for its upstream.
const UpstreamCluster = "upstream"

// connectionKey is the context key of a connection's number.
type connectionKey struct{}

// numberConnection gives each accepted connection the next number, from 0
// as Envoy numbers them, for rules keyed by "connection".
func (gw *Gateway) numberConnection(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connectionKey{}, gw.conns.Add(1)-1)
}

// connectionID is the request's connection number as Envoy hands over its
// connection.id: 8 bytes, little-endian.
func connectionID(ctx context.Context) []byte {
	n, _ := ctx.Value(connectionKey{}).(uint64)
	return binary.LittleEndian.AppendUint64(nil, n)
}

// ServeHTTP runs one request through the plugin: request headers, then
// (unless the plugin answered locally) the upstream, then response headers,
// body and trailers.
func (gw *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ref := gw.acquire()
	defer ref.release()
	vms := ref.host.VMs()
	vm := vms[gw.next.Add(1)%uint64(len(vms))]
	stream, err := vm.NewStream(r.Context(), wasmhost.Properties{
		"source.address": []byte(r.RemoteAddr),
		"request.time":   []byte(time.Now().UTC().Format(time.RFC3339Nano)),
		// Every request goes to the one upstream, named as envoy.yaml
		// names its cluster: rules on "cluster" apply here as there.
		"xds.cluster_name": []byte(UpstreamCluster),
		"connection.id":    connectionID(r.Context()),
	})
	if err != nil {
		gw.fail(w, "plugin unavailable", err)
		return
	}
	reset := false
	defer func() {
		end := stream.Finish
		if reset {
			end = stream.Reset // downstream gone or timed out while paused
		}
		if err := end(); err != nil {
			gw.log.Error("ending the stream", "err", err)
		}
	}()

	reqHeaders := requestHeaders(r)
	res, err := stream.RequestHeaders(reqHeaders, r.ContentLength == 0)
	if err != nil {
		gw.fail(w, "plugin error on request headers", err)
		return
	}
	if res.Action == wasmhost.ActionPause && res.Local == nil {
		// Paused (for example a delayed admission): wait until the plugin
		// resumes the request or answers it, then go on as Envoy would.
		ctx, cancel := context.WithTimeout(r.Context(), gw.opts.PauseTimeout)
		res, err = stream.Wait(ctx)
		cancel()
		if err != nil {
			reset = true
			http.Error(w, "request paused by the plugin was not resumed in time", http.StatusServiceUnavailable)
			return
		}
	}
	if res.Local != nil {
		writeLocal(w, res.Local, res.ResponseHeaders)
		return
	}
	if gw.forward(w, r, stream, res.Headers) {
		// The response started and cannot be finished: as Envoy resets
		// the stream, abort it (the client sees the response cut off).
		reset = true
		panic(http.ErrAbortHandler)
	}
}

// forward sends the request upstream with the plugin's header map and
// passes the upstream's response through the plugin: on_response_headers,
// then the body (passBody). It reports a response that started and must be
// aborted.
func (gw *Gateway) forward(w http.ResponseWriter, r *http.Request, stream *wasmhost.Stream, headers []wasmhost.Header) (abort bool) {
	out, err := upstreamRequest(r, gw.upstream, headers)
	if err != nil {
		gw.fail(w, "building the upstream request", err)
		return false
	}
	resp, err := gw.client.Do(out)
	if err != nil {
		http.Error(w, "upstream unreachable: "+err.Error(), http.StatusBadGateway)
		return false
	}
	defer resp.Body.Close()
	// As in Envoy, the headers end the stream only when neither a body nor
	// trailers follow (the trailers an upstream announces are known here;
	// the client gives a HEAD, 204 or 304 answer no body).
	headersOnly := (resp.ContentLength == 0 || resp.Body == http.NoBody) && len(resp.Trailer) == 0
	res, err := stream.ResponseHeaders(responseHeaders(resp.StatusCode, resp.Header), headersOnly)
	if err != nil {
		gw.fail(w, "plugin error on response headers", err)
		return false
	}
	if res.Local != nil { // the plugin replaced the upstream's answer
		writeLocal(w, res.Local, res.Headers)
		return false
	}
	status := writeHeaders(w, res.Headers, resp.StatusCode)
	for name := range resp.Trailer { // the trailers the upstream announced
		w.Header().Add("Trailer", name)
	}
	w.WriteHeader(status)
	if headersOnly {
		return false
	}
	return gw.passBody(w, resp, stream)
}

// bodyChunk is the most passBody reads from the upstream at once: a chunk
// of the body through on_response_body.
const bodyChunk = 32 << 10

// passBody passes the upstream's body through the plugin as it arrives, as
// Envoy does with data frames: each read (up to bodyChunk bytes) goes to
// on_response_body, then downstream, flushed (so that server-sent events
// stream through). The last chunk carries end of stream, unless trailers
// follow: then on_response_trailers ends the stream. When the upstream's
// end comes after its last data, an empty chunk carries end of stream, as
// Envoy's empty last frame does. It reports a response to abort: the
// upstream or the client failed mid-body, the plugin failed, or it replied
// locally (too late to replace a response under way: Envoy resets the
// stream).
func (gw *Gateway) passBody(w http.ResponseWriter, resp *http.Response, stream *wasmhost.Stream) (abort bool) {
	rc := http.NewResponseController(w)
	buf := make([]byte, bodyChunk)
	for {
		n, err := resp.Body.Read(buf)
		if err != nil && !errors.Is(err, io.EOF) {
			gw.log.Warn("the upstream failed mid-body; resetting the stream", "err", err)
			return true
		}
		eof := err != nil
		var trailers []wasmhost.Header
		if eof { // their values are known once the body is read
			trailers = headerList(resp.Trailer, nil)
		}
		if n > 0 || (eof && len(trailers) == 0) {
			res, err := stream.ResponseBody(buf[:n], eof && len(trailers) == 0)
			if err != nil {
				gw.log.Error("plugin error on the response body; resetting the stream", "err", err)
				return true
			}
			if res.Local != nil {
				gw.log.Warn("the plugin replied locally after the response started; resetting the stream",
					"status", res.Local.Status)
				return true
			}
			if n > 0 {
				if _, err := w.Write(buf[:n]); err != nil {
					return true // the client went away
				}
				if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
					return true // the client went away
				}
			}
		}
		if !eof {
			continue
		}
		if len(trailers) > 0 {
			if err := stream.ResponseTrailers(trailers); err != nil {
				gw.log.Error("plugin error on response trailers", "err", err)
			}
			for name, values := range resp.Trailer {
				w.Header()[name] = values
			}
		}
		return false
	}
}

// writeLocal answers with the plugin's local reply. As in Envoy, the reply
// has already travelled the response path: headers are what
// on_response_headers left of them.
func writeLocal(w http.ResponseWriter, local *wasmhost.LocalResponse, headers []wasmhost.Header) {
	if headers == nil {
		headers = append([]wasmhost.Header{{":status", strconv.Itoa(local.Status)}}, local.Headers...)
	}
	w.WriteHeader(writeHeaders(w, headers, local.Status))
	if !local.GRPC { // a gRPC reply carries its body in grpc-message
		w.Write(local.Body)
	}
}

func (gw *Gateway) fail(w http.ResponseWriter, what string, err error) {
	gw.log.Error(what, "err", err)
	http.Error(w, what, http.StatusInternalServerError)
}

// requestHeaders renders r as a proxy-wasm header map: pseudo-headers first,
// names lower-case, one entry per value.
func requestHeaders(r *http.Request) []wasmhost.Header {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	h := make([]wasmhost.Header, 0, 4+len(r.Header))
	h = append(h,
		wasmhost.Header{":method", r.Method},
		wasmhost.Header{":path", r.URL.RequestURI()},
		wasmhost.Header{":authority", r.Host},
		wasmhost.Header{":scheme", scheme},
	)
	for name, values := range r.Header {
		lower := strings.ToLower(name)
		for _, v := range values {
			h = append(h, wasmhost.Header{lower, v})
		}
	}
	return h
}

func responseHeaders(status int, header http.Header) []wasmhost.Header {
	return headerList(header, []wasmhost.Header{{":status", strconv.Itoa(status)}})
}

// headerList appends header to h as a proxy-wasm header map (names lower-case,
// one entry per value).
func headerList(header http.Header, h []wasmhost.Header) []wasmhost.Header {
	for name, values := range header {
		lower := strings.ToLower(name)
		for _, v := range values {
			h = append(h, wasmhost.Header{lower, v})
		}
	}
	return h
}

// hopByHop headers are connection-specific and never forwarded (RFC 9110 7.6.1).
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true,
	"te": true, "trailer": true, "upgrade": true, "content-length": true,
}

// upstreamRequest builds the upstream request from the plugin's header map.
func upstreamRequest(r *http.Request, base *url.URL, headers []wasmhost.Header) (*http.Request, error) {
	method, path := r.Method, r.URL.RequestURI()
	out := make(http.Header, len(headers))
	for _, kv := range headers {
		switch kv[0] {
		case ":method":
			method = kv[1]
		case ":path":
			path = kv[1]
		case ":authority", ":scheme":
		default:
			if !hopByHop[kv[0]] && !strings.HasPrefix(kv[0], ":") {
				out.Add(kv[0], kv[1])
			}
		}
	}
	target, err := base.Parse(path)
	if err != nil {
		return nil, fmt.Errorf(":path %q: %w", path, err)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, target.String(), r.Body)
	if err != nil {
		return nil, err
	}
	req.Header = out
	req.ContentLength = r.ContentLength
	req.Host = r.Host
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		req.Header.Add("X-Forwarded-For", ip)
	}
	return req, nil
}

// writeHeaders copies a proxy-wasm response header map to w and returns its
// :status (or fallback if absent or invalid).
func writeHeaders(w http.ResponseWriter, headers []wasmhost.Header, fallback int) int {
	status := fallback
	dst := w.Header()
	for _, kv := range headers {
		if kv[0] == ":status" {
			if n, err := strconv.Atoi(kv[1]); err == nil && n >= 100 && n <= 999 {
				status = n
			}
			continue
		}
		if hopByHop[kv[0]] || strings.HasPrefix(kv[0], ":") {
			continue
		}
		dst.Add(kv[0], kv[1])
	}
	return status
}

// watchConfig reloads the plugin configuration when the file's contents
// change. As in Envoy, a new configuration replaces the root contexts and
// keeps the VMs and shared data, so buckets survive; a configuration the
// plugin rejects is logged and the old one stays in force.
func (gw *Gateway) watchConfig(ctx context.Context) {
	t := time.NewTicker(gw.opts.ReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			gw.reloadIfChanged(ctx)
		}
	}
}

func (gw *Gateway) reloadIfChanged(ctx context.Context) {
	data, err := os.ReadFile(gw.opts.ConfigPath)
	if err != nil {
		gw.log.Warn("config file unreadable; keeping the configuration in force", "path", gw.opts.ConfigPath, "err", err)
		return
	}
	gw.configMu.Lock()
	defer gw.configMu.Unlock()
	if bytes.Equal(data, gw.configSum) {
		return
	}
	if err := gw.Host().Reconfigure(ctx, data); err != nil {
		gw.log.Error("plugin rejected the new configuration; the previous one stays in force", "path", gw.opts.ConfigPath, "err", err)
		gw.configSum = data // do not retry the same bad bytes every tick
		return
	}
	gw.configSum = data
	gw.log.Info("configuration reloaded; bucket state kept", "path", gw.opts.ConfigPath)
	gw.warnMissingClusters(data)
}

// pluginLog forwards guest log lines to the gateway's logger at their own
// level: a plugin warning is a WARN line, as in Envoy's log.
func pluginLog(log *slog.Logger) func(wasmhost.LogEntry) {
	return func(e wasmhost.LogEntry) {
		log.Log(context.Background(), slogLevel(e.Level), strings.TrimRight(e.Message, "\n"), "from", "plugin", "vm", e.VM)
	}
}

// slogLevel maps a proxy-wasm log level onto slog's (trace is debug,
// critical is error).
func slogLevel(l wasmhost.LogLevel) slog.Level {
	switch {
	case l <= wasmhost.LogLevelDebug:
		return slog.LevelDebug
	case l == wasmhost.LogLevelInfo:
		return slog.LevelInfo
	case l == wasmhost.LogLevelWarn:
		return slog.LevelWarn
	}
	return slog.LevelError
}
