package xds

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensiongrpc "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/admin/trial"
	"github.com/sluice-rl/sluice/internal/poll"
	"github.com/sluice-rl/sluice/shared/policy"
)

const (
	policyA = `{"rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 3}}]}`
	policyB = `{"mode": "shadow", "rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 3}}]}`
	policyC = `{"rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10}}]}`
)

// startServer serves s on a loopback port until the test ends.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after its context was cancelled")
		}
	})
	return lis.Addr().String()
}

func newTestServer(t *testing.T) (*Server, string) {
	t.Helper()
	s := NewServer(nil, Options{WasmPath: "/opt/sluice/ratelimit.wasm"})
	return s, startServer(t, s)
}

func publish(t *testing.T, s *Server, n int64, json string) {
	t.Helper()
	if err := s.Publish(context.Background(), Version{Number: n, JSON: []byte(json), Author: "test"}); err != nil {
		t.Fatalf("Publish(%d): %v", n, err)
	}
}

// adsClient is a minimal xDS client speaking the ADS protocol the way
// Envoy does for ECDS.
type adsClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *core.Node
	resps  chan *discovery.DiscoveryResponse
	errs   chan error
	cancel context.CancelFunc
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func newADSClient(t *testing.T, addr, nodeID string) *adsClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(dial(t, addr)).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &adsClient{
		t: t, stream: stream, cancel: cancel,
		node:  &core.Node{Id: nodeID, Cluster: "test-cluster"},
		resps: make(chan *discovery.DiscoveryResponse, 16),
		errs:  make(chan error, 1),
	}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				c.errs <- err
				return
			}
			c.resps <- resp
		}
	}()
	t.Cleanup(cancel)
	return c
}

// send sends a request; nonce/version answer an earlier response, a
// non-empty nack makes it a NACK.
func (c *adsClient) send(version, nonce, nack string) {
	c.t.Helper()
	req := &discovery.DiscoveryRequest{
		Node:          c.node,
		TypeUrl:       TypeURL,
		ResourceNames: []string{DefaultResourceName},
		VersionInfo:   version,
		ResponseNonce: nonce,
	}
	if nack != "" {
		req.ErrorDetail = &status.Status{Code: 3, Message: nack}
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *adsClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	select {
	case resp := <-c.resps:
		return resp
	case err := <-c.errs:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(5 * time.Second):
		c.t.Fatal("no response within 5s")
	}
	return nil
}

func (c *adsClient) expectNothing(d time.Duration) {
	c.t.Helper()
	select {
	case resp := <-c.resps:
		c.t.Fatalf("unexpected response version %q nonce %q", resp.GetVersionInfo(), resp.GetNonce())
	case <-time.After(d):
	}
}

// pluginConfig checks that resp carries exactly one well-formed Sluice
// resource and returns its plugin configuration.
func pluginConfig(t *testing.T, resp *discovery.DiscoveryResponse) string {
	t.Helper()
	if resp.GetTypeUrl() != TypeURL {
		t.Fatalf("type_url %q, want %q", resp.GetTypeUrl(), TypeURL)
	}
	if len(resp.GetResources()) != 1 {
		t.Fatalf("%d resources, want 1", len(resp.GetResources()))
	}
	var tec core.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&tec); err != nil {
		t.Fatalf("resource is not a TypedExtensionConfig: %v", err)
	}
	if tec.GetName() != DefaultResourceName {
		t.Errorf("resource name %q, want %q", tec.GetName(), DefaultResourceName)
	}
	if got := tec.GetTypedConfig().GetTypeUrl(); got != FilterTypeURL {
		t.Fatalf("typed_config type %q, want %q", got, FilterTypeURL)
	}
	var w wasmfilter.Wasm
	if err := tec.GetTypedConfig().UnmarshalTo(&w); err != nil {
		t.Fatal(err)
	}
	if err := w.ValidateAll(); err != nil {
		t.Errorf("the wasm filter config fails Envoy's validation: %v", err)
	}
	pc := w.GetConfig()
	vm := pc.GetVmConfig()
	//lint:ignore SA1019 the field WasmFilter sets, for the older Envoys.
	if pc.GetName() != DefaultResourceName || pc.GetRootId() != "sluice" || !pc.GetFailOpen() ||
		vm.GetVmId() != "sluice" || vm.GetRuntime() != "envoy.wasm.runtime.v8" ||
		vm.GetCode().GetLocal().GetFilename() != "/opt/sluice/ratelimit.wasm" {
		t.Errorf("unexpected plugin config: %v", pc)
	}
	var sv wrapperspb.StringValue
	if err := pc.GetConfiguration().UnmarshalTo(&sv); err != nil {
		t.Fatalf("configuration is not a StringValue: %v", err)
	}
	return sv.GetValue()
}

func nodeStatus(t *testing.T, s *Server, id string) NodeStatus {
	t.Helper()
	for _, n := range s.Nodes() {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("node %q not tracked; nodes: %+v", id, s.Nodes())
	return NodeStatus{}
}

func TestPublishReachesClientAndACKIsRecorded(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 1, policyA)

	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	resp := c.recv()
	if resp.GetVersionInfo() != "1" {
		t.Errorf("version %q, want the policy number 1", resp.GetVersionInfo())
	}
	if got := pluginConfig(t, resp); got != policyA {
		t.Errorf("plugin configuration %q, want the policy JSON %q", got, policyA)
	}
	poll.Until(t, "the node to be tracked", func() bool { return len(s.Nodes()) == 1 })
	if n := nodeStatus(t, s, "envoy-1"); !n.Connected || n.Cluster != "test-cluster" || n.AckedVersion != "" || n.LastSeen.IsZero() {
		t.Errorf("before the ACK: %+v, want connected, cluster test-cluster, nothing ACKed", n)
	}

	c.send("1", resp.GetNonce(), "")
	poll.Until(t, "the ACK to be recorded", func() bool { return nodeStatus(t, s, "envoy-1").AckedVersion == "1" })
	if n := nodeStatus(t, s, "envoy-1"); n.NackedVersion != "" || n.NackError != "" {
		t.Errorf("after an ACK: %+v, want no NACK", n)
	}
	c.expectNothing(100 * time.Millisecond) // an ACK is not answered
}

func TestClientWaitsForTheFirstPublish(t *testing.T) {
	s, addr := newTestServer(t)
	c := newADSClient(t, addr, "early")
	c.send("", "", "")
	c.expectNothing(200 * time.Millisecond)
	publish(t, s, 7, policyA)
	if resp := c.recv(); resp.GetVersionInfo() != "7" || pluginConfig(t, resp) != policyA {
		t.Errorf("got version %q, want 7 with policy A", resp.GetVersionInfo())
	}
}

func TestNewPublishIsPushedToConnectedNode(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 1, policyA)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	first := c.recv()
	c.send("1", first.GetNonce(), "")
	c.expectNothing(100 * time.Millisecond)

	publish(t, s, 2, policyB)
	second := c.recv()
	if second.GetVersionInfo() != "2" || pluginConfig(t, second) != policyB {
		t.Fatalf("pushed version %q, want 2 with policy B", second.GetVersionInfo())
	}
	if second.GetNonce() == first.GetNonce() {
		t.Error("the push reused the previous nonce")
	}
	c.send("2", second.GetNonce(), "")
	poll.Until(t, "ACK of version 2", func() bool { return nodeStatus(t, s, "envoy-1").AckedVersion == "2" })
}

func TestNACKIsRecordedAndNotResent(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 1, policyA)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	r1 := c.recv()
	c.send("1", r1.GetNonce(), "")

	publish(t, s, 2, `{"rules": []}`)
	r2 := c.recv()
	const why = "failed to load in-VM configuration: rules: at least one rule is required"
	c.send("1", r2.GetNonce(), why) // NACK: still running version 1
	poll.Until(t, "the NACK to be recorded", func() bool { return nodeStatus(t, s, "envoy-1").NackedVersion == "2" })
	n := nodeStatus(t, s, "envoy-1")
	if n.NackError != why || n.AckedVersion != "1" || !n.Connected {
		t.Errorf("after the NACK: %+v, want NACK of 2 with the error detail, ACKed still 1", n)
	}
	// go-control-plane alone would answer the NACK with the same rejected
	// version at once, and again after every NACK.
	c.expectNothing(300 * time.Millisecond)

	// The fix is published: it is pushed, and its ACK clears the NACK.
	publish(t, s, 3, policyC)
	r3 := c.recv()
	if r3.GetVersionInfo() != "3" || pluginConfig(t, r3) != policyC {
		t.Fatalf("after the fix: version %q, want 3", r3.GetVersionInfo())
	}
	c.send("3", r3.GetNonce(), "")
	poll.Until(t, "ACK of 3", func() bool { return nodeStatus(t, s, "envoy-1").AckedVersion == "3" })
	if n := nodeStatus(t, s, "envoy-1"); n.NackedVersion != "" || n.NackError != "" {
		t.Errorf("after ACKing a newer version: %+v, want the NACK cleared", n)
	}
}

func TestNACKOfAnOlderVersionGetsTheCurrentOne(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 1, `{"bad": true}`)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	r1 := c.recv()
	publish(t, s, 2, policyA) // published while the node was rejecting 1
	c.send("", r1.GetNonce(), "unknown field bad")
	var r2 *discovery.DiscoveryResponse
	for r2 = c.recv(); r2.GetVersionInfo() != "2"; r2 = c.recv() {
	}
	if pluginConfig(t, r2) != policyA {
		t.Error("version 2 does not carry policy A")
	}
	poll.Until(t, "NACK of 1", func() bool { return nodeStatus(t, s, "envoy-1").NackedVersion == "1" })
}

func TestNodesAreTrackedSeparately(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 4, policyA)
	a := newADSClient(t, addr, "node-a")
	b := newADSClient(t, addr, "node-b")
	a.send("", "", "")
	b.send("", "", "")
	ra, rb := a.recv(), b.recv()
	a.send("4", ra.GetNonce(), "")
	b.send("", rb.GetNonce(), "node-b cannot load the module")
	poll.Until(t, "both answers", func() bool {
		return nodeStatus(t, s, "node-a").AckedVersion == "4" && nodeStatus(t, s, "node-b").NackedVersion == "4"
	})
	if na := nodeStatus(t, s, "node-a"); na.NackedVersion != "" || na.NackError != "" {
		t.Errorf("node-a: %+v, want no NACK (node-b's must not leak)", na)
	}
	if nb := nodeStatus(t, s, "node-b"); nb.AckedVersion != "" || nb.NackError != "node-b cannot load the module" {
		t.Errorf("node-b: %+v, want nothing ACKed and its own error", nb)
	}
	if got := s.Nodes(); len(got) != 2 || got[0].ID != "node-a" || got[1].ID != "node-b" {
		t.Errorf("Nodes() = %+v, want node-a then node-b", got)
	}

	// node-b hangs up: it is remembered, disconnected; node-a is not affected.
	b.cancel()
	poll.Until(t, "node-b to be disconnected", func() bool { return !nodeStatus(t, s, "node-b").Connected })
	if !nodeStatus(t, s, "node-a").Connected {
		t.Error("node-a shows disconnected")
	}
}

func TestReconnectingNodeReportsTheVersionItRuns(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 9, policyA)
	c := newADSClient(t, addr, "envoy-1")
	// First request of a new stream: version_info is what the node applied
	// before (for example from before an admin restart).
	c.send("9", "", "")
	poll.Until(t, "the node", func() bool { return len(s.Nodes()) == 1 })
	if n := nodeStatus(t, s, "envoy-1"); n.AckedVersion != "9" {
		t.Errorf("AckedVersion %q, want 9 from the reconnect's version_info", n.AckedVersion)
	}
}

func TestECDSServiceWithoutADS(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 1, policyA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := extensiongrpc.NewExtensionConfigDiscoveryServiceClient(dial(t, addr)).StreamExtensionConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{
		Node: &core.Node{Id: "plain-ecds"}, ResourceNames: []string{DefaultResourceName},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if pluginConfig(t, resp) != policyA {
		t.Error("ECDS stream did not deliver policy A")
	}
}

func TestPublishOrdering(t *testing.T) {
	s := NewServer(nil, Options{})
	ctx := context.Background()
	for _, v := range []Version{{Number: 0, JSON: []byte(policyA)}, {Number: -1, JSON: []byte(policyA)}, {Number: 1}} {
		if err := s.Publish(ctx, v); err == nil {
			t.Errorf("Publish(%d, %q) accepted", v.Number, v.JSON)
		}
	}
	publish(t, s, 5, policyA)
	publish(t, s, 5, policyA) // same again: no-op
	if err := s.Publish(ctx, Version{Number: 5, JSON: []byte(policyB)}); err == nil || !strings.Contains(err.Error(), "version 5") {
		t.Errorf("same number, other JSON: got %v, want an error naming version 5", err)
	}
	publish(t, s, 4, policyB) // older: ignored
	wantPublished(t, s, 5)
}

// wantPublished checks that version n is the one published and in the
// snapshot nodes are sent.
func wantPublished(t *testing.T, s *Server, n int64) {
	t.Helper()
	if s.Published() != n {
		t.Errorf("published %d, want %d", s.Published(), n)
	}
	snap, err := s.cache.GetSnapshot(groupKey)
	if err != nil {
		t.Fatal(err)
	}
	if v := snap.GetVersion(TypeURL); v != strconv.FormatInt(n, 10) {
		t.Errorf("snapshot version %q, want %d", v, n)
	}
}

// A StringValue must be UTF-8: a configuration that is not is refused with
// an error, not pushed with no configuration, and the version published
// stays.
func TestPublishRefusesAConfigurationThatIsNotUTF8(t *testing.T) {
	s := NewServer(nil, Options{})
	publish(t, s, 1, policyA)
	err := s.Publish(context.Background(), Version{Number: 2, JSON: []byte("{\"rules\": [\"caf\xe9\"]}")})
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("Publish of a configuration that is not UTF-8: got %v, want an error saying it must be UTF-8", err)
	}
	wantPublished(t, s, 1)
}

func TestServeStopsWhenContextEnds(t *testing.T) {
	s := NewServer(nil, Options{})
	publish(t, s, 1, policyA)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	c := newADSClient(t, lis.Addr().String(), "envoy-1")
	c.send("", "", "")
	c.recv()

	cancel() // with a stream open
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	case <-time.After(4 * time.Second): // the hard stop comes after 5s
		t.Fatal("Serve did not stop promptly with a stream open")
	}
	select {
	case <-c.errs:
	case <-time.After(5 * time.Second):
		t.Error("the client's stream did not end")
	}
	poll.Until(t, "the node to show disconnected", func() bool { return !nodeStatus(t, s, "envoy-1").Connected })
}

func TestTrackerForgetsOldestDisconnectedNodes(t *testing.T) {
	tr := newNodeTracker(NewServer(nil, Options{}).log, 2)
	clock := time.Unix(1000, 0)
	tr.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	for i := int64(1); i <= 4; i++ {
		tr.open(i)
		tr.request(i, &core.Node{Id: fmt.Sprintf("n%d", i)}, TypeURL, "", "", false, "")
	}
	tr.closed(1)
	tr.closed(2)
	// Four nodes, two connected: the two disconnected ones go, oldest first.
	if got := tr.list(); len(got) != 2 || got[0].ID != "n3" || got[1].ID != "n4" {
		t.Errorf("nodes %+v, want n3 and n4 (connected) kept", got)
	}
	tr.closed(3)
	tr.open(5)
	tr.request(5, &core.Node{Id: "n5"}, TypeURL, "", "", false, "")
	tr.closed(4) // n3 (older) goes, n4 stays
	got := tr.list()
	if len(got) != 2 || got[0].ID != "n4" || got[1].ID != "n5" {
		t.Errorf("nodes %+v, want n4 and n5", got)
	}
}

func TestDeltaADSIsServedAndTracked(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 3, policyA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(dial(t, addr)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{
		Node:                   &core.Node{Id: "delta-envoy", Cluster: "c"},
		TypeUrl:                TypeURL,
		ResourceNamesSubscribe: []string{DefaultResourceName},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != DefaultResourceName || resp.GetSystemVersionInfo() != "3" {
		t.Fatalf("delta response %v, want the resource at system version 3", resp)
	}
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the delta ACK", func() bool { return nodeStatus(t, s, "delta-envoy").AckedVersion == "3" })

	publish(t, s, 4, policyB)
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: TypeURL, ResponseNonce: resp.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "no"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the delta NACK", func() bool { return nodeStatus(t, s, "delta-envoy").NackedVersion == "4" })
	if n := nodeStatus(t, s, "delta-envoy"); n.NackError != "no" || n.AckedVersion != "3" {
		t.Errorf("after the delta NACK: %+v", n)
	}
}

func TestTrialIsPushedInShadowAndEndingRestoresTheVersion(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 4, policyA)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	first := c.recv()
	c.send("4", first.GetNonce(), "")

	draft := `{"rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`
	merged, _, err := trial.Merge([]byte(policyA), []byte(draft))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PushTrial(context.Background(), 3, merged); err == nil {
		t.Error("a trial over a version that is not the published one was accepted")
	}
	if err := s.PushTrial(context.Background(), 4, merged); err != nil {
		t.Fatal(err)
	}
	pushed := c.recv()
	if pushed.GetVersionInfo() != "4+trial1" {
		t.Errorf("trial version %q, want 4+trial1", pushed.GetVersionInfo())
	}
	cfg, err := policy.Parse([]byte(pluginConfig(t, pushed)))
	if err != nil {
		t.Fatalf("the pushed trial configuration is invalid: %v", err)
	}
	enforced, tried := cfg.RuleByName("per-ip"), cfg.RuleByName("trial-per-ip")
	if enforced == nil || enforced.Mode != policy.ModeEnforce || enforced.TokenBucket.Burst != 3 {
		t.Errorf("the enforced rule changed in the trial: %+v", enforced)
	}
	if tried == nil || tried.Mode != policy.ModeShadow || tried.TokenBucket.Burst != 1 {
		t.Errorf("the trial rule: %+v, want burst 1 in shadow", tried)
	}
	if s.Published() != 4 {
		t.Errorf("Published() = %d during a trial, want the stored version 4", s.Published())
	}
	c.send(pushed.GetVersionInfo(), pushed.GetNonce(), "")

	if err := s.EndTrial(context.Background()); err != nil {
		t.Fatal(err)
	}
	back := c.recv()
	if back.GetVersionInfo() != "4" || pluginConfig(t, back) != policyA {
		t.Errorf("after the trial: version %q, want 4 with policy A again", back.GetVersionInfo())
	}
	c.send("4", back.GetNonce(), "")
	if err := s.EndTrial(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.expectNothing(100 * time.Millisecond) // no trial: nothing to end
}

func TestPublishDuringATrialReplacesTheTrial(t *testing.T) {
	s, addr := newTestServer(t)
	publish(t, s, 1, policyA)
	if err := s.PushTrial(context.Background(), 1, []byte(policyC)); err != nil {
		t.Fatal(err)
	}
	publish(t, s, 2, policyB)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	if resp := c.recv(); resp.GetVersionInfo() != "2" || pluginConfig(t, resp) != policyB {
		t.Errorf("got %q, want version 2 without the trial", resp.GetVersionInfo())
	}
}
