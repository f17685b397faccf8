// Package xds pushes Sluice policies to Envoy (and to the development
// gateway) over ECDS, the Extension Config Discovery Service.
//
// The admin serves one resource, an envoy.config.core.v3.TypedExtensionConfig
// named "sluice-ratelimit" (Options.ResourceName), whose typed_config is the
// wasm HTTP filter's configuration (envoy.extensions.filters.http.wasm.v3.Wasm)
// with the policy JSON as the plugin configuration. Envoy's HTTP connection
// manager fetches it through `config_discovery` on an ADS stream (or a plain
// ECDS stream); both are served on one gRPC port by go-control-plane.
//
// Every node gets the same resource: the snapshot cache is keyed by one
// constant group instead of by node. The resource's version is the policy
// version number, followed by "+trial<n>" during a shadow trial and by
// "+resets.<hash>" while the configuration carries resets (resets.go).
// Only the plugin configuration changes between versions; vm_config
// (vm_id, runtime, code, environment) stays the same, so Envoy keeps the
// VM and its shared data (the buckets) and only runs proxy_on_configure
// again.
//
// Server callbacks track every node that connects: its cluster, whether a
// stream is open, when it was last heard from, the version it ACKed and its
// last NACK with the error Envoy reported (the plugin's rejection).
package xds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensiongrpc "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	// DefaultResourceName is the ECDS resource (and wasm plugin) name.
	// envoy.yaml's config_discovery filter name must be the same.
	DefaultResourceName = "sluice-ratelimit"
	// DefaultWasmPath is where `make build` writes the plugin.
	DefaultWasmPath = "bin/ratelimit.wasm"
	// VMID and RootID are the plugin's vm_id and root_id. Keeping vm_id
	// (and the code) unchanged across pushes is what keeps the buckets.
	VMID   = "sluice"
	RootID = "sluice"
	// DefaultTokenEnv is the VM environment variable that carries the
	// telemetry token to the plugin (policies say "token_env":
	// "SLUICE_TELEMETRY_TOKEN"; envoy.yaml passes it from Envoy's
	// environment). It is also the admin's own variable for
	// -telemetry-token, so one name follows the token everywhere.
	DefaultTokenEnv = "SLUICE_TELEMETRY_TOKEN"
	// Runtime is the wasm runtime Envoy runs the plugin in.
	Runtime = "envoy.wasm.runtime.v8"

	// TypeURL is the ECDS resource type: TypedExtensionConfig.
	TypeURL = resource.ExtensionConfigType
	// FilterTypeURL is the type of the extension config carried inside it
	// (what envoy.yaml lists in config_discovery.type_urls).
	FilterTypeURL = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
)

// Options configure a Server.
type Options struct {
	// ResourceName is the ECDS resource name (default DefaultResourceName).
	ResourceName string
	// WasmPath is the plugin file Envoy loads (vm_config.code.local.filename),
	// as Envoy will see it: use an absolute path when Envoy's working
	// directory differs from the admin's (default DefaultWasmPath).
	WasmPath string
	// VMEnv is the plugin VM's environment (vm_config.environment_variables),
	// for example the telemetry token of policies with telemetry.token_env.
	// It is fixed for the life of the Server: every push carries the same
	// vm_config, which is what lets Envoy keep the VM and its buckets.
	VMEnv VMEnv
	// MaxNodes bounds how many disconnected nodes are remembered for
	// Nodes(); the ones heard from least recently are forgotten first
	// (default 1000). Connected nodes are always kept.
	MaxNodes int
	// GRPCOptions are added to the gRPC server's (TLS credentials, say).
	GRPCOptions []grpc.ServerOption
	// Pushed, if set, is called with every configuration put in the
	// snapshot (the exact bytes the nodes get, resets included) and the
	// policy version it was built from, so that the telemetry's config
	// hashes name that version. It runs under the server's lock.
	Pushed func(version int64, config []byte)
}

// VMEnv is vm_config.environment_variables: KeyValues are set by the admin
// (they travel in the xDS resource), HostEnvKeys are copied by Envoy from
// its own process environment.
type VMEnv struct {
	KeyValues   map[string]string
	HostEnvKeys []string
}

func (e VMEnv) proto() *wasmv3.EnvironmentVariables {
	if len(e.KeyValues) == 0 && len(e.HostEnvKeys) == 0 {
		return nil
	}
	return &wasmv3.EnvironmentVariables{KeyValues: maps.Clone(e.KeyValues), HostEnvKeys: slices.Clone(e.HostEnvKeys)}
}

// groupKey is the only key of the snapshot cache: every node gets the same
// snapshot (see constantHash).
const groupKey = "sluice"

// constantHash puts every node into one group, so that one SetSnapshot
// serves every node, including nodes that connect later.
type constantHash struct{}

func (constantHash) ID(*core.Node) string { return groupKey }

// Server is the admin's xDS server. It implements policies.Publisher
// (Publish) and httpapi.NodeLister (Nodes). It is safe for concurrent use.
type Server struct {
	log   *slog.Logger
	opts  Options
	cache cache.SnapshotCache
	nodes *nodeTracker

	mu        sync.Mutex // serializes Publish
	published int64      // version number in the snapshot, 0 = none yet
	json      []byte     // its plugin configuration
	trialRev  int64      // trial configurations pushed so far (names their versions)
	trial     bool       // the snapshot holds a trial configuration, not json
	trialJSON []byte     // that trial configuration
	resets    []Reset    // added to every configuration pushed (resets.go)
	current   string     // the snapshot's resource version ("" before the first publish)
}

// NewServer returns a Server with no policy published yet: nodes that
// connect wait until the first Publish. Call Serve to accept connections.
func NewServer(logger *slog.Logger, opts Options) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.ResourceName == "" {
		opts.ResourceName = DefaultResourceName
	}
	if opts.WasmPath == "" {
		opts.WasmPath = DefaultWasmPath
	}
	if opts.MaxNodes <= 0 {
		opts.MaxNodes = 1000
	}
	log := logger.With("component", "xds")
	return &Server{
		log:   log,
		opts:  opts,
		cache: cache.NewSnapshotCache(true, constantHash{}, cpLogger{log}),
		nodes: newNodeTracker(log, opts.MaxNodes),
	}
}

// Options returns the options in force (defaults filled in).
func (s *Server) Options() Options { return s.opts }

// Publish makes v the configuration of every node, connected or not:
// nodes with an open stream get it pushed at once. It does not validate
// the JSON (the caller publishes only versions the policy parser
// accepted); a configuration the plugin rejects is NACKed by the nodes and
// shows in Nodes.
//
// Versions only move forward: a version older than the one published is
// ignored (two saves racing to publish), republishing the same version is a
// no-op, and republishing it with different JSON is an error.
func (s *Server) Publish(ctx context.Context, v Version) error {
	if v.Number <= 0 {
		return fmt.Errorf("xds: publish: version number %d must be positive", v.Number)
	}
	if len(v.JSON) == 0 {
		return fmt.Errorf("xds: publish: version %d has an empty configuration", v.Number)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case v.Number < s.published:
		s.log.Info("not publishing an older version", "version", v.Number, "published", s.published)
		return nil
	case v.Number == s.published && bytes.Equal(v.JSON, s.json):
		return nil
	case v.Number == s.published:
		return fmt.Errorf("xds: publish: version %d is already published with a different configuration", v.Number)
	}
	if err := s.setSnapshot(ctx, v.Number, strconv.FormatInt(v.Number, 10), v.JSON); err != nil {
		return fmt.Errorf("xds: publish version %d: %w", v.Number, err)
	}
	s.published, s.trial, s.trialJSON = v.Number, false, nil
	s.json = append([]byte(nil), v.JSON...)
	s.log.Info("published", "version", v.Number, "resource", s.opts.ResourceName, "author", v.Author)
	return nil
}

// setSnapshot pushes config, built from policy version base, with the
// current resets added, under the resource version version (with the
// resets' suffix). Call it with s.mu held.
func (s *Server) setSnapshot(ctx context.Context, base int64, version string, config []byte) error {
	composed, suffix := Compose(config, s.resets)
	version += suffix
	res, err := Resource(s.opts.ResourceName, s.opts.WasmPath, s.opts.VMEnv, composed)
	if err != nil {
		return err
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{TypeURL: {res}})
	if err != nil {
		return err
	}
	if s.opts.Pushed != nil {
		s.opts.Pushed(base, composed) // before the nodes can report its hash
	}
	if err := s.cache.SetSnapshot(ctx, groupKey, snap); err != nil {
		return err
	}
	s.current = version
	return nil
}

// TrialVersion is the resource version of the n-th trial configuration
// pushed over policy version base: "<base>+trial<n>". Nodes ACK it, and
// the Nodes page shows it, so a node running a trial is recognisable.
func TrialVersion(base, n int64) string {
	return strconv.FormatInt(base, 10) + "+trial" + strconv.FormatInt(n, 10)
}

// PushTrial publishes config, a configuration that is not a stored
// version (the current version base plus a trial's shadow rules), in place
// of version base's, under TrialVersion. base must be the version
// published: a trial is always pushed over the current policy. The next
// Publish of a new version, or EndTrial, replaces it.
func (s *Server) PushTrial(ctx context.Context, base int64, config []byte) error {
	if len(config) == 0 {
		return errors.New("xds: trial: empty configuration")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if base != s.published {
		return fmt.Errorf("xds: trial over version %d, but version %d is published", base, s.published)
	}
	s.trialRev++
	version := TrialVersion(base, s.trialRev)
	if err := s.setSnapshot(ctx, base, version, config); err != nil {
		return fmt.Errorf("xds: trial %s: %w", version, err)
	}
	s.trial, s.trialJSON = true, append([]byte(nil), config...)
	s.log.Info("published a trial", "version", version)
	return nil
}

// EndTrial publishes the current version again, without the trial's
// rules. It does nothing when no trial configuration is published.
func (s *Server) EndTrial(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.trial {
		return nil
	}
	if err := s.setSnapshot(ctx, s.published, strconv.FormatInt(s.published, 10), s.json); err != nil {
		return fmt.Errorf("xds: ending the trial over version %d: %w", s.published, err)
	}
	s.trial, s.trialJSON = false, nil
	s.log.Info("trial ended; published the current version again", "version", s.published)
	return nil
}

// Published returns the version number last published (0 if none).
func (s *Server) Published() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published
}

// Serving returns the resource version of what the server pushes now
// ("" before the first publish): the policy version, with a trial's and
// the resets' suffixes.
func (s *Server) Serving() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// Nodes reports every node seen over xDS, sorted by ID.
func (s *Server) Nodes() []NodeStatus { return s.nodes.list() }

// Serve answers ADS and ECDS on lis until ctx is done, then stops: open
// streams end (clients reconnect elsewhere or later), and Serve returns nil.
// It returns early with the error if serving fails. Serve may be called
// again, on another listener, with the same Server: published policy and
// node history are kept.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	gs := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(1000),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, s.opts.GRPCOptions...)...)
	// The xDS server ends its streams when ctx is done, which lets
	// GracefulStop finish instead of waiting for Envoy to hang up.
	xs := server.NewServer(ctx, nackParkingCache{s.cache}, s.nodes)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	extensiongrpc.RegisterExtensionConfigDiscoveryServiceServer(gs, xs)

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	s.log.Info("serving ADS and ECDS", "addr", lis.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("xds: serve: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("xds: serve: %w", err)
	}
	return nil
}

// Resource builds the ECDS resource: a TypedExtensionConfig named name
// whose typed_config is the wasm HTTP filter running the plugin at wasmPath
// in a VM with environment env, with policyJSON as its configuration.
func Resource(name, wasmPath string, env VMEnv, policyJSON []byte) (*core.TypedExtensionConfig, error) {
	wasm, err := WasmFilter(name, wasmPath, env, policyJSON)
	if err != nil {
		return nil, err
	}
	filter, err := anypb.New(wasm)
	if err != nil {
		return nil, fmt.Errorf("xds: packing the wasm filter: %w", err)
	}
	return &core.TypedExtensionConfig{Name: name, TypedConfig: filter}, nil
}

// WasmFilter is the wasm HTTP filter configuration for the plugin. The
// configuration is a StringValue: Envoy hands its bytes to
// proxy_on_configure unchanged. A StringValue must be UTF-8, which the
// filter's parser requires of every configuration, so a configuration
// that is not is refused here rather than pushed without its policy.
// fail_open lets traffic through, unlimited, if the VM fails (a rate
// limiter should not take the site down).
func WasmFilter(name, wasmPath string, env VMEnv, policyJSON []byte) (*wasmfilter.Wasm, error) {
	configuration, err := anypb.New(wrapperspb.String(string(policyJSON)))
	if err != nil {
		return nil, fmt.Errorf("xds: packing the configuration (it must be UTF-8): %w", err)
	}
	return &wasmfilter.Wasm{Config: &wasmv3.PluginConfig{
		Name:   name,
		RootId: RootID,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			VmId:    VMID,
			Runtime: Runtime,
			Code: &core.AsyncDataSource{Specifier: &core.AsyncDataSource_Local{
				Local: &core.DataSource{Specifier: &core.DataSource_Filename{Filename: wasmPath}},
			}},
			EnvironmentVariables: env.proto(),
		}},
		Configuration: configuration,
		// fail_open is deprecated in newer Envoys in favour of
		// failure_policy: FAIL_OPEN, but every Envoy we support reads it.
		//lint:ignore SA1019 the older Envoys we support know no failure_policy.
		FailOpen: true,
	}}, nil
}
