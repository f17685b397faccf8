package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The gateway subscribes to the admin the way Envoy does with
// config_discovery on an ADS stream: one ECDS resource, a
// TypedExtensionConfig wrapping the wasm filter's configuration.
const (
	ecdsTypeURL = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
	// defaultXDSResource must equal the admin's xds.DefaultResourceName
	// (plugin/ does not import admin/; a test checks they match).
	defaultXDSResource = "sluice-ratelimit"
	xdsNodeCluster     = "sluice-gateway"
)

// defaultNodeID names this gateway to the admin: "sluice-gateway-<hostname>".
func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return "sluice-gateway-" + host
}

// xdsClient keeps the plugin configuration in step with the admin's ECDS
// resource. On each response it extracts the plugin configuration and
// applies it (a config-only update: VMs and buckets are kept); it ACKs what
// it applied and NACKs, with the plugin's error, what it could not apply,
// keeping the configuration in force. When the admin is unreachable it
// retries with backoff and keeps serving with what it has.
type xdsClient struct {
	addr     string
	resource string
	node     *core.Node
	apply    func(ctx context.Context, config []byte, env map[string]string) error
	log      *slog.Logger

	minBackoff, maxBackoff time.Duration

	mu       sync.Mutex
	accepted string // version_info of the last response applied ("" before the first)
}

// run subscribes until ctx is done, reconnecting with exponential backoff
// (with jitter) whenever the stream fails or ends.
func (c *xdsClient) run(ctx context.Context) {
	conn, err := grpc.NewClient(c.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: c.minBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: c.maxBackoff},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Notice an admin that vanished without closing the connection.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	)
	if err != nil { // only for a malformed target, which parseOptions rejects
		c.log.Error("xDS client", "xds", c.addr, "err", err)
		return
	}
	defer conn.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)

	delay := c.minBackoff
	for {
		healthy, err := c.session(ctx, ads)
		if ctx.Err() != nil {
			return
		}
		if healthy {
			delay = c.minBackoff
		}
		wait := delay/2 + rand.N(delay/2+1) // jitter: [delay/2, delay]
		c.log.Warn("xDS stream to the admin ended; the configuration in force is kept",
			"xds", c.addr, "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		delay = min(2*delay, c.maxBackoff)
	}
}

// session runs one ADS stream: subscribe, then answer every response. It
// reports whether the admin answered at least once.
func (c *xdsClient) session(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient) (healthy bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	accepted := c.accepted
	c.mu.Unlock()
	// As Envoy does on a new stream: the node, the resource, and the
	// version in force (so the admin knows what this node runs).
	if err := stream.Send(&discovery.DiscoveryRequest{
		Node:          c.node,
		TypeUrl:       ecdsTypeURL,
		ResourceNames: []string{c.resource},
		VersionInfo:   accepted,
	}); err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return healthy, err
		}
		healthy = true
		if resp.GetTypeUrl() != ecdsTypeURL {
			c.log.Warn("xDS: ignoring a response of a type not subscribed to", "type", resp.GetTypeUrl())
			continue
		}
		if err := stream.Send(c.handle(ctx, resp)); err != nil {
			return healthy, err
		}
	}
}

// handle applies one response and returns the ACK or NACK for it.
func (c *xdsClient) handle(ctx context.Context, resp *discovery.DiscoveryResponse) *discovery.DiscoveryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	reply := &discovery.DiscoveryRequest{
		TypeUrl:       ecdsTypeURL,
		ResourceNames: []string{c.resource},
		ResponseNonce: resp.GetNonce(),
	}
	version := resp.GetVersionInfo()
	config, env, found, err := pluginConfiguration(resp.GetResources(), c.resource)
	if err == nil && found {
		err = c.apply(ctx, config, env)
	}
	if err != nil {
		c.log.Error("xDS: configuration rejected (NACK); the previous one stays in force",
			"version", version, "in_force", c.accepted, "err", err)
		reply.VersionInfo = c.accepted
		reply.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		return reply
	}
	if found {
		c.log.Info("xDS: configuration applied; bucket state kept", "version", version)
	} else {
		// Envoy would fall back to the filter's default config; the
		// gateway keeps what it runs rather than dropping the limits.
		c.log.Warn("xDS: the admin sent no resource "+c.resource+"; keeping the configuration in force", "version", version)
	}
	c.accepted = version
	reply.VersionInfo = version
	return reply
}

// pluginConfiguration finds the resource called name and returns its wasm
// filter's plugin configuration, as Envoy would hand it to
// proxy_on_configure, and the VM environment its vm_config asks for.
// found is false if the response does not carry it.
func pluginConfiguration(resources []*anypb.Any, name string) (config []byte, env map[string]string, found bool, err error) {
	for _, res := range resources {
		if res.GetTypeUrl() == "type.googleapis.com/envoy.service.discovery.v3.Resource" {
			var wrapped discovery.Resource
			if err := res.UnmarshalTo(&wrapped); err != nil {
				return nil, nil, false, fmt.Errorf("resource: %w", err)
			}
			res = wrapped.GetResource()
		}
		var tec core.TypedExtensionConfig
		if err := res.UnmarshalTo(&tec); err != nil {
			return nil, nil, false, fmt.Errorf("resource of type %s: want %s: %w", res.GetTypeUrl(), ecdsTypeURL, err)
		}
		if tec.GetName() != name {
			continue
		}
		var w wasmfilter.Wasm
		if err := tec.GetTypedConfig().UnmarshalTo(&w); err != nil {
			return nil, nil, true, fmt.Errorf("%s: typed_config of type %s: want the wasm HTTP filter: %w", name, tec.GetTypedConfig().GetTypeUrl(), err)
		}
		if err := w.ValidateAll(); err != nil { // Envoy validates before applying
			return nil, nil, true, fmt.Errorf("%s: %w", name, err)
		}
		config, err := configurationBytes(w.GetConfig().GetConfiguration())
		if err != nil {
			return nil, nil, true, fmt.Errorf("%s: %w", name, err)
		}
		return config, pushedEnv(w.GetConfig().GetVmConfig().GetEnvironmentVariables(), os.LookupEnv), true, nil
	}
	return nil, nil, false, nil
}

// configurationBytes renders the plugin configuration the way Envoy does:
// StringValue and BytesValue unwrapped, Struct as JSON, absent as empty.
func configurationBytes(a *anypb.Any) ([]byte, error) {
	if a == nil {
		return nil, nil
	}
	msg, err := a.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	switch v := msg.(type) {
	case *wrapperspb.StringValue:
		return []byte(v.GetValue()), nil
	case *wrapperspb.BytesValue:
		return v.GetValue(), nil
	case *structpb.Struct:
		return protojson.Marshal(v)
	}
	return nil, fmt.Errorf("configuration of type %s: want google.protobuf.StringValue, BytesValue or Struct", a.GetTypeUrl())
}

// applyConfig puts config in force unless it already is. Used in xDS mode,
// where the file watcher is off. A pushed VM environment that differs from
// the running VMs' starts new VMs, as Envoy does for a new vm_config.
func (gw *Gateway) applyConfig(ctx context.Context, config []byte, pushed map[string]string) error {
	gw.configMu.Lock()
	defer gw.configMu.Unlock()
	env := gw.vmEnv(pushed)
	if !maps.Equal(env, gw.cur.Load().env) {
		if err := gw.restartVMs(ctx, config, env); err != nil {
			return err
		}
		gw.configSum = append([]byte(nil), config...)
		gw.warnMissingClusters(config)
		return nil
	}
	if bytes.Equal(config, gw.configSum) {
		return nil
	}
	if err := gw.Host().Reconfigure(ctx, config); err != nil {
		return err
	}
	gw.configSum = append([]byte(nil), config...)
	gw.warnMissingClusters(config)
	return nil
}

// newXDSClient returns the ECDS client for the gateway's options.
func (gw *Gateway) newXDSClient() *xdsClient {
	o := gw.opts
	return &xdsClient{
		addr:     o.XDS,
		resource: o.XDSResource,
		node: &core.Node{
			Id:            o.NodeID,
			Cluster:       xdsNodeCluster,
			UserAgentName: "sluice-gateway",
		},
		apply:      gw.applyConfig,
		log:        gw.log,
		minBackoff: min(250*time.Millisecond, o.XDSMaxBackoff),
		maxBackoff: o.XDSMaxBackoff,
	}
}

// checkXDSOptions validates the xDS flags (when -xds is set).
func checkXDSOptions(o Options) error {
	if o.XDS == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(o.XDS); err != nil || port == "" {
		return fmt.Errorf("-xds %q: want host:port of the admin's xDS listener, such as 127.0.0.1:18000", o.XDS)
	}
	if o.XDSResource == "" {
		return errors.New("-xds-resource: must not be empty (the admin serves \"" + defaultXDSResource + "\")")
	}
	if o.NodeID == "" {
		return errors.New("-node-id: must not be empty")
	}
	return nil
}
