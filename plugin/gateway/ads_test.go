package main

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/poll"
)

// adsServer is a minimal state-of-the-world ADS server for the gateway's
// tests: it pushes one ECDS resource (the plugin's wasm filter named
// defaultXDSResource) to every stream and records what each node did with
// it. It knows nothing of the admin: the admin's own xDS server is tested
// against the gateway binary in admin/e2e.
type adsServer struct {
	env map[string]string // the VM environment pushed in vm_config

	mu      sync.Mutex
	version int64
	config  string
	streams map[chan struct{}]bool // woken on publish
	nodes   map[string]*adsNode
}

// adsNode is what one node last did.
type adsNode struct {
	Connected                   bool
	Cluster                     string
	AckedVersion, NackedVersion string
	NackError                   string
}

func (s *adsServer) StreamAggregatedResources(stream discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	wake := make(chan struct{}, 1)
	s.mu.Lock()
	s.streams[wake] = true
	s.mu.Unlock()
	var node string
	defer func() {
		s.mu.Lock()
		delete(s.streams, wake)
		if n := s.nodes[node]; n != nil {
			n.Connected = false
		}
		s.mu.Unlock()
	}()
	reqs := make(chan *discoverygrpc.DiscoveryRequest)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			reqs <- req
		}
	}()
	sent := int64(0) // the version last sent on this stream
	for {
		select {
		case err := <-errc:
			return err
		case <-stream.Context().Done():
			return nil
		case req := <-reqs:
			s.mu.Lock()
			if id := req.GetNode().GetId(); id != "" {
				node = id
			}
			n := s.nodes[node]
			if n == nil {
				n = &adsNode{}
				s.nodes[node] = n
			}
			n.Connected = true
			if c := req.GetNode().GetCluster(); c != "" {
				n.Cluster = c
			}
			if req.GetErrorDetail() != nil {
				n.NackedVersion, n.NackError = strconv.FormatInt(sent, 10), req.GetErrorDetail().GetMessage()
			}
			n.AckedVersion = req.GetVersionInfo()
			s.mu.Unlock()
		case <-wake:
		}
		s.mu.Lock()
		version, config := s.version, s.config
		s.mu.Unlock()
		if version == 0 || version == sent {
			continue
		}
		resp, err := s.response(version, config)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		sent = version
	}
}

func (s *adsServer) DeltaAggregatedResources(discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return nil
}

// response is the ECDS response carrying config as version.
func (s *adsServer) response(version int64, config string) (*discoverygrpc.DiscoveryResponse, error) {
	configuration, err := anypb.New(wrapperspb.String(config))
	if err != nil {
		return nil, err
	}
	var env *wasmv3.EnvironmentVariables
	if len(s.env) > 0 {
		env = &wasmv3.EnvironmentVariables{KeyValues: s.env}
	}
	filter, err := anypb.New(&wasmfilter.Wasm{Config: &wasmv3.PluginConfig{
		Name: defaultXDSResource,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			Runtime: "envoy.wasm.runtime.v8",
			Code: &core.AsyncDataSource{Specifier: &core.AsyncDataSource_Local{
				Local: &core.DataSource{Specifier: &core.DataSource_Filename{Filename: "/x.wasm"}}}},
			EnvironmentVariables: env,
		}},
		Configuration: configuration,
	}})
	if err != nil {
		return nil, err
	}
	res, err := anypb.New(&core.TypedExtensionConfig{Name: defaultXDSResource, TypedConfig: filter})
	if err != nil {
		return nil, err
	}
	v := strconv.FormatInt(version, 10)
	return &discoverygrpc.DiscoveryResponse{VersionInfo: v, Nonce: v, TypeUrl: ecdsTypeURL, Resources: []*anypb.Any{res}}, nil
}

// admin runs an adsServer on addr until stop.
type admin struct {
	srv  *adsServer
	stop func()
}

func startAdmin(t *testing.T, addr string) *admin { return startAdminWith(t, addr, nil) }

// startAdminWith serves on addr, pushing env as the VMs' environment.
func startAdminWith(t *testing.T, addr string, env map[string]string) *admin {
	t.Helper()
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the previous server's port may take a moment to free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &adsServer{env: env, streams: map[chan struct{}]bool{}, nodes: map[string]*adsNode{}}
	gs := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	a := &admin{srv: srv}
	var once sync.Once
	a.stop = func() { once.Do(gs.Stop) }
	t.Cleanup(a.stop)
	return a
}

func (a *admin) publish(t *testing.T, n int64, config string) {
	t.Helper()
	s := a.srv
	s.mu.Lock()
	s.version, s.config = n, config
	for wake := range s.streams {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

func (a *admin) node(id string) adsNode {
	a.srv.mu.Lock()
	defer a.srv.mu.Unlock()
	if n := a.srv.nodes[id]; n != nil {
		return *n
	}
	return adsNode{}
}

func (a *admin) waitAcked(t *testing.T, node, version string) {
	t.Helper()
	poll.Until(t, "node "+node+" to ACK version "+version, func() bool { return a.node(node).AckedVersion == version })
}
