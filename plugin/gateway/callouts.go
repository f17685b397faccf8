package main

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

// Callouts answers the plugin's dispatch_http_call (e.g. its telemetry
// reports) for real, the way Envoy does through a cluster: each cluster name
// maps to a base URL (-cluster name=http://host:port). The request is sent
// to the base URL joined with the call's :path, with its :method, its
// :authority as Host, and its other headers and body; the answer (status,
// headers, body) is delivered to the plugin with HTTPCall.Respond. A
// transport error, a timeout or an unknown cluster delivers the failure
// callback (HTTPCall.Fail), as Envoy does.
type Callouts struct {
	clusters map[string]*url.URL
	client   *http.Client
	log      *slog.Logger
	ctx      context.Context
	sem      chan struct{}
}

const (
	// defaultCalloutTimeout applies to calls dispatched without a timeout.
	defaultCalloutTimeout = 30 * time.Second
	// maxCalloutBody bounds a response body kept for the plugin.
	maxCalloutBody = 1 << 20
	// maxCallouts bounds the calls in flight; more are failed at once.
	maxCallouts = 256
)

// NewCallouts returns a handler for the given clusters (name to base URL).
// ctx ends in-flight calls (they are then failed).
func NewCallouts(ctx context.Context, clusters map[string]*url.URL, logger *slog.Logger) *Callouts {
	return &Callouts{
		clusters: clusters,
		client: &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log: logger,
		ctx: ctx,
		sem: make(chan struct{}, maxCallouts),
	}
}

// Names lists the clusters, sorted (for wasmhost.Config.Clusters).
func (c *Callouts) Names() []string {
	names := make([]string, 0, len(c.clusters))
	for n := range c.clusters {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// HandleHTTPCall implements wasmhost.HTTPCallHandler; it never blocks.
func (c *Callouts) HandleHTTPCall(call *wasmhost.HTTPCall) {
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

func (c *Callouts) do(call *wasmhost.HTTPCall, base *url.URL) {
	timeout := call.Timeout
	if timeout <= 0 {
		timeout = defaultCalloutTimeout
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	headers, body, err := c.send(ctx, call, base)
	if err != nil {
		c.log.Debug("plugin callout failed", "cluster", call.Cluster, "err", err)
		_ = call.Fail()
		return
	}
	_ = call.Respond(headers, body)
}

func (c *Callouts) send(ctx context.Context, call *wasmhost.HTTPCall, base *url.URL) ([]wasmhost.Header, []byte, error) {
	method := call.Header(":method")
	if method == "" {
		method = http.MethodGet
	}
	path := call.Header(":path")
	if path == "" {
		path = "/"
	}
	u, err := url.Parse(strings.TrimSuffix(base.String(), "/") + path)
	if err != nil {
		return nil, nil, fmt.Errorf(":path %q: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(string(call.Body)))
	if err != nil {
		return nil, nil, err
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
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCalloutBody))
	if err != nil {
		return nil, nil, err
	}
	out := []wasmhost.Header{{":status", strconv.Itoa(resp.StatusCode)}}
	for name, vs := range resp.Header {
		for _, v := range vs {
			out = append(out, wasmhost.Header{strings.ToLower(name), v})
		}
	}
	return out, body, nil
}

// parseClusters parses "name=url" specs (from -cluster flags and
// SLUICE_CLUSTERS, "a=url,b=url").
func parseClusters(specs []string) (map[string]*url.URL, error) {
	out := map[string]*url.URL{}
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		name, raw, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-cluster %q: want name=http://host:port", s)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("-cluster %s: %q is not an http(s) URL such as http://127.0.0.1:9000", name, raw)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("-cluster %s: given twice", name)
		}
		out[name] = u
	}
	return out, nil
}

// listFlag collects a repeatable flag (-cluster, -vm-env); its specs start
// as the environment variable's list, which the first flag replaces.
type listFlag struct {
	specs []string
	set   bool
}

func (f *listFlag) String() string { return strings.Join(f.specs, ",") }

func (f *listFlag) Set(v string) error {
	if !f.set { // the first flag replaces the environment variable's list
		f.specs, f.set = nil, true
	}
	f.specs = append(f.specs, v)
	return nil
}
