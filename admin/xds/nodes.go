package xds

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

// nodeTracker implements go-control-plane's server callbacks to follow
// every node: which streams it has open, and what it did with the ECDS
// responses it was sent (ACK or NACK, matched by nonce).
//
// A DiscoveryRequest that carries a response_nonce answers the response
// that had that nonce: without error_detail it ACKs that response's
// version, with error_detail it NACKs it (its version_info then still
// names the last version the node accepted). The nonce, not the request's
// version_info, tells which version was rejected.
type nodeTracker struct {
	log      *slog.Logger
	maxNodes int
	now      func() time.Time

	mu      sync.Mutex
	nodes   map[string]*nodeState
	streams map[int64]*streamState
}

type nodeState struct {
	status  NodeStatus
	streams int   // open streams
	nacks   int64 // rejections since the node was first seen
}

type streamState struct {
	nodeID string // "" until the first request names the node
	sent   []sentResponse
}

// sentResponse remembers which version went out with which nonce.
type sentResponse struct{ nonce, version string }

// maxSent bounds the nonces remembered per stream. A node answers every
// response, in order, so only the last few can still be answered.
const maxSent = 16

var _ server.Callbacks = (*nodeTracker)(nil)

func newNodeTracker(log *slog.Logger, maxNodes int) *nodeTracker {
	return &nodeTracker{
		log:      log,
		maxNodes: maxNodes,
		now:      time.Now,
		nodes:    map[string]*nodeState{},
		streams:  map[int64]*streamState{},
	}
}

func (t *nodeTracker) list() []NodeStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]NodeStatus, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, n.status)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// nodeCount is a node's status with its count of rejections.
type nodeCount struct {
	NodeStatus
	nacks int64
}

func (t *nodeTracker) counts() []nodeCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]nodeCount, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, nodeCount{n.status, n.nacks})
	}
	return out
}

// request records a request from stream id (state of the node behind it).
// typeURL is the request's type; nonce and errMsg describe what it answers.
func (t *nodeTracker) request(id int64, node *core.Node, typeURL, versionInfo, nonce string, nack bool, errMsg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[id]
	if st == nil { // a request without OnStreamOpen: should not happen
		st = &streamState{}
		t.streams[id] = st
	}
	if st.nodeID == "" {
		if node.GetId() == "" {
			return // nothing to attach it to; Envoy always sends its node id
		}
		st.nodeID = node.GetId()
		n := t.nodes[st.nodeID]
		if n == nil {
			n = &nodeState{status: NodeStatus{ID: st.nodeID}}
			t.nodes[st.nodeID] = n
			t.log.Info("node connected", "node", st.nodeID, "cluster", node.GetCluster())
		}
		n.streams++
	}
	n := t.nodes[st.nodeID]
	n.status.Connected = true
	n.status.LastSeen = t.now()
	if c := node.GetCluster(); c != "" {
		n.status.Cluster = c
	}
	if typeURL != TypeURL {
		return
	}
	if nonce == "" {
		// A first request. Its version_info, if any, is what the node
		// applied before (from an earlier stream, perhaps to an earlier
		// admin process): it still runs that.
		if versionInfo != "" && !nack {
			n.status.AckedVersion = versionInfo
		}
		return
	}
	version, known := st.versionFor(nonce)
	if !known {
		version = versionInfo
	}
	if nack {
		n.status.NackedVersion = version
		n.status.NackError = errMsg
		n.nacks++
		t.log.Warn("node rejected the configuration (NACK)", "node", st.nodeID, "version", version, "error", errMsg, "still_running", versionInfo)
		return
	}
	if version == "" {
		return
	}
	n.status.AckedVersion = version
	if n.status.NackedVersion != "" && newer(version, n.status.NackedVersion) {
		// A version newer than the rejected one is in force: the NACK is
		// history.
		n.status.NackedVersion, n.status.NackError = "", ""
	}
}

// newer reports whether version a is later than b: by number for policy
// numbers, by inequality for anything else.
func newer(a, b string) bool {
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil {
		return a != b
	}
	return x > y
}

func (st *streamState) versionFor(nonce string) (string, bool) {
	for i := len(st.sent) - 1; i >= 0; i-- {
		if st.sent[i].nonce == nonce {
			return st.sent[i].version, true
		}
	}
	return "", false
}

func (t *nodeTracker) response(id int64, typeURL, nonce, version string) {
	if typeURL != TypeURL {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[id]
	if st == nil {
		return
	}
	if len(st.sent) == maxSent {
		st.sent = append(st.sent[:0], st.sent[1:]...)
	}
	st.sent = append(st.sent, sentResponse{nonce: nonce, version: version})
}

func (t *nodeTracker) open(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streams[id] = &streamState{}
}

func (t *nodeTracker) closed(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[id]
	delete(t.streams, id)
	if st == nil || st.nodeID == "" {
		return
	}
	n := t.nodes[st.nodeID]
	if n == nil {
		return
	}
	n.streams--
	n.status.LastSeen = t.now()
	if n.streams <= 0 {
		n.streams = 0
		n.status.Connected = false
		t.log.Info("node disconnected", "node", st.nodeID)
	}
	t.forgetOldest()
}

// forgetOldest drops disconnected nodes, least recently seen first, while
// there are more than maxNodes nodes.
func (t *nodeTracker) forgetOldest() {
	for len(t.nodes) > t.maxNodes {
		var oldest string
		var when time.Time
		for id, n := range t.nodes {
			if n.streams == 0 && (oldest == "" || n.status.LastSeen.Before(when)) {
				oldest, when = id, n.status.LastSeen
			}
		}
		if oldest == "" {
			return // all connected: keep them
		}
		delete(t.nodes, oldest)
	}
}

// State-of-the-world callbacks.

func (t *nodeTracker) OnStreamOpen(_ context.Context, id int64, _ string) error {
	t.open(id)
	return nil
}

func (t *nodeTracker) OnStreamClosed(id int64, _ *core.Node) { t.closed(id) }

func (t *nodeTracker) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	ed := req.GetErrorDetail()
	t.request(id, req.GetNode(), req.GetTypeUrl(), req.GetVersionInfo(), req.GetResponseNonce(), ed != nil, ed.GetMessage())
	return nil
}

func (t *nodeTracker) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	t.response(id, resp.GetTypeUrl(), resp.GetNonce(), resp.GetVersionInfo())
}

// Incremental (delta) callbacks: the same bookkeeping; the response's
// system_version_info is the snapshot version, i.e. the policy number.

func (t *nodeTracker) OnDeltaStreamOpen(_ context.Context, id int64, _ string) error {
	t.open(id)
	return nil
}

func (t *nodeTracker) OnDeltaStreamClosed(id int64, _ *core.Node) { t.closed(id) }

func (t *nodeTracker) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	ed := req.GetErrorDetail()
	t.request(id, req.GetNode(), req.GetTypeUrl(), "", req.GetResponseNonce(), ed != nil, ed.GetMessage())
	return nil
}

func (t *nodeTracker) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	t.response(id, resp.GetTypeUrl(), resp.GetNonce(), resp.GetSystemVersionInfo())
}

// REST fetches are answered but not tracked: they have no stream, so no
// ACK or NACK.

func (t *nodeTracker) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error { return nil }

func (t *nodeTracker) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}
