// Package netcall answers a wasmhost guest's dispatch_http_call over the
// network, the way Envoy does through a cluster: each cluster name maps to a
// base URL. It is what the development gateway and the fleet-mode tests use
// to reach a real server (the admin, a rate limit service).
//
// Schemes: http:// (HTTP/1.1), https:// (TLS, HTTP/2 when negotiated) and
// h2c:// (HTTP/2 over cleartext with prior knowledge, what Envoy uses for a
// gRPC cluster with http2_protocol_options and no TLS). The request is sent
// to the base URL joined with the call's :path, with its :method, its
// :authority as Host, and its other headers and body. The answer (":status",
// headers, body, trailers) is delivered with HTTPCall.RespondWithTrailers, so
// the guest reads gRPC's grpc-status from the trailers map (or from the
// headers of a trailers-only response), as in Envoy. A transport error, a
// timeout or an unknown cluster delivers the failure callback
// (HTTPCall.Fail), as Envoy does.
package netcall

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// Client answers dispatched calls; it implements wasmhost.HTTPCallHandler.
type Client struct {
	clusters map[string]*url.URL
	http1    *http.Client
	h2c      *http.Client
	log      *slog.Logger
	ctx      context.Context
	sem      chan struct{}
}

const (
	// DefaultTimeout applies to calls dispatched without a timeout.
	DefaultTimeout = 30 * time.Second
	// MaxBody bounds a response body kept for the guest.
	MaxBody = 1 << 20
	// MaxInFlight bounds the calls in flight; more are failed at once.
	MaxInFlight = 256
)

// New returns a client for the given clusters (name to base URL, see
// ParseClusters). ctx ends in-flight calls (they are then failed).
func New(ctx context.Context, clusters map[string]*url.URL, logger *slog.Logger) *Client {
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		clusters: clusters,
		http1:    &http.Client{CheckRedirect: noRedirect},
		h2c:      &http.Client{CheckRedirect: noRedirect, Transport: h2c},
		log:      logger,
		ctx:      ctx,
		sem:      make(chan struct{}, MaxInFlight),
	}
}

// Names lists the clusters, sorted (for wasmhost.Config.Clusters).
func (c *Client) Names() []string {
	names := make([]string, 0, len(c.clusters))
	for n := range c.clusters {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// HandleHTTPCall implements wasmhost.HTTPCallHandler; it never blocks.
func (c *Client) HandleHTTPCall(call *wasmhost.HTTPCall) {
	base, ok := c.clusters[call.Cluster]
	if !ok {
		c.log.Warn("plugin callout to an unknown cluster", "cluster", call.Cluster)
		_ = call.Fail()
		return
	}
	select {
	case c.sem <- struct{}{}:
	default:
		c.log.Warn("too many plugin callouts in flight; failing one", "cluster", call.Cluster)
		_ = call.Fail()
		return
	}
	go func() {
		defer func() { <-c.sem }()
		c.do(call, base)
	}()
}

func (c *Client) do(call *wasmhost.HTTPCall, base *url.URL) {
	timeout := call.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	resp, err := c.send(ctx, call, base)
	if err != nil {
		c.log.Debug("plugin callout failed", "cluster", call.Cluster, "err", err)
		_ = call.Fail()
		return
	}
	_ = call.RespondWithTrailers(resp.headers, resp.body, resp.trailers)
}

type response struct {
	headers, trailers []wasmhost.Header
	body              []byte
}

func (c *Client) send(ctx context.Context, call *wasmhost.HTTPCall, base *url.URL) (*response, error) {
	method := call.Header(":method")
	if method == "" {
		method = http.MethodGet
	}
	path := call.Header(":path")
	if path == "" {
		path = "/"
	}
	client, b := c.http1, *base
	if b.Scheme == "h2c" {
		client, b.Scheme = c.h2c, "http"
	}
	u, err := url.Parse(strings.TrimSuffix(b.String(), "/") + path)
	if err != nil {
		return nil, fmt.Errorf(":path %q: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(string(call.Body)))
	if err != nil {
		return nil, err
	}
	for _, h := range call.Headers {
		switch {
		case h[0] == ":authority":
			req.Host = h[1]
		case strings.HasPrefix(h[0], ":"), h[0] == "content-length", h[0] == "host":
		default:
			req.Header.Add(h[0], h[1])
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return nil, err
	}
	// Trailers are complete only once the body was read to EOF.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody))
	out := &response{body: body, headers: []wasmhost.Header{{":status", strconv.Itoa(resp.StatusCode)}}}
	out.headers = appendHeaders(out.headers, resp.Header)
	out.trailers = appendHeaders(nil, resp.Trailer)
	return out, nil
}

func appendHeaders(out []wasmhost.Header, h http.Header) []wasmhost.Header {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic order for the guest
	for _, name := range names {
		for _, v := range h[name] {
			out = append(out, wasmhost.Header{strings.ToLower(name), v})
		}
	}
	return out
}

// ParseClusters parses "name=url" specs (the gateway's -cluster flags and
// SLUICE_CLUSTERS). url is http://, https:// or h2c://host:port.
func ParseClusters(specs []string) (map[string]*url.URL, error) {
	out := map[string]*url.URL{}
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		name, raw, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-cluster %q: want name=http://host:port (or https://, h2c://)", s)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "h2c") || u.Host == "" {
			return nil, fmt.Errorf("-cluster %s: %q is not an http(s) or h2c URL such as http://127.0.0.1:9000 or h2c://127.0.0.1:8081", name, raw)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("-cluster %s: given twice", name)
		}
		out[name] = u
	}
	return out, nil
}
