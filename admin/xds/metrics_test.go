package xds

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/poll"
)

// scrape returns the server's metrics, one "name label=value... value"
// line per sample in the registry's order.
func scrape(t *testing.T, s *Server) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s.Collector()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	var b strings.Builder
	for _, f := range families {
		for _, m := range f.GetMetric() {
			b.WriteString(f.GetName())
			for _, l := range m.GetLabel() {
				b.WriteString(" " + l.GetName() + "=" + l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			b.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
		}
	}
	return b.String()
}

// pushState is what the metrics should say: the server's version and
// trial, and envoy-1's state (nil: not seen yet).
type pushState struct {
	published, trial int
	node             *nodeWant
}

type nodeWant struct{ nacks, acked, connected, current, rejected int }

func (w pushState) text() string {
	var b strings.Builder
	if n := w.node; n != nil {
		fmt.Fprintf(&b, "sluice_xds_nacks_total node=envoy-1 %d\n", n.nacks)
		fmt.Fprintf(&b, "sluice_xds_node_acked_version node=envoy-1 %d\n", n.acked)
		fmt.Fprintf(&b, "sluice_xds_node_connected node=envoy-1 %d\n", n.connected)
		fmt.Fprintf(&b, "sluice_xds_node_current node=envoy-1 %d\n", n.current)
		fmt.Fprintf(&b, "sluice_xds_node_rejected node=envoy-1 %d\n", n.rejected)
	}
	fmt.Fprintf(&b, "sluice_xds_published_version %d\nsluice_xds_trial_active %d\n", w.published, w.trial)
	return b.String()
}

func expectScrape(t *testing.T, s *Server, when string, want pushState) {
	t.Helper()
	poll.Watch(t, 5*time.Second, 10*time.Millisecond, when+": the metrics", func() (bool, string) {
		got := scrape(t, s)
		return got == want.text(), "got\n" + got + "want\n" + want.text()
	})
}

// TestMetricsTellWhetherEveryNodeRunsThePublishedPolicy follows one node
// through an ACK, a NACK, the fix, a trial and a disconnection.
func TestMetricsTellWhetherEveryNodeRunsThePublishedPolicy(t *testing.T) {
	s, addr := newTestServer(t)
	expectScrape(t, s, "before any publish", pushState{})
	publish(t, s, 1, policyA)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	r1 := c.recv()
	c.send("1", r1.GetNonce(), "")
	expectScrape(t, s, "after the ACK of 1", pushState{published: 1,
		node: &nodeWant{acked: 1, connected: 1, current: 1}})

	publish(t, s, 2, `{"rules": []}`)
	r2 := c.recv()
	c.send("1", r2.GetNonce(), "rules: at least one rule is required")
	expectScrape(t, s, "after the NACK of 2", pushState{published: 2,
		node: &nodeWant{nacks: 1, acked: 1, connected: 1, rejected: 1}})

	publish(t, s, 3, policyC)
	r3 := c.recv()
	c.send("3", r3.GetNonce(), "")
	expectScrape(t, s, "after the fix is ACKed", pushState{published: 3,
		node: &nodeWant{nacks: 1, acked: 3, connected: 1, current: 1}})

	if err := s.PushTrial(context.Background(), 3, []byte(policyB)); err != nil {
		t.Fatal(err)
	}
	rt := c.recv()
	expectScrape(t, s, "while the trial is not ACKed yet", pushState{published: 3, trial: 1,
		node: &nodeWant{nacks: 1, acked: 3, connected: 1}})
	c.send(rt.GetVersionInfo(), rt.GetNonce(), "")
	expectScrape(t, s, "after the trial's ACK", pushState{published: 3, trial: 1,
		node: &nodeWant{nacks: 1, acked: 3, connected: 1, current: 1}})

	c.cancel()
	expectScrape(t, s, "after the node disconnected", pushState{published: 3, trial: 1,
		node: &nodeWant{nacks: 1, acked: 3, current: 1}})
}

func TestPolicyNumberReadsTrialVersionsAndRefusesOthers(t *testing.T) {
	for in, want := range map[string]int64{"7": 7, "12+trial3": 12, "": 0, "v2": 0, "0": 0, "-1": 0, "2025-01-01T00:00:00Z": 0} {
		got, ok := policyNumber(in)
		if ok != (want > 0) || (ok && got != want) {
			t.Errorf("policyNumber(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}

// BenchmarkCollectorWithAThousandNodes: one scrape of the xDS metrics with
// as many nodes as the server remembers by default (Options.MaxNodes).
func BenchmarkCollectorWithAThousandNodes(b *testing.B) {
	s := NewServer(nil, Options{})
	if err := s.Publish(context.Background(), Version{Number: 3, JSON: []byte(policyA)}); err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		s.nodes.open(int64(i))
		s.nodes.request(int64(i), &core.Node{Id: "envoy-" + strconv.Itoa(i)}, TypeURL, "3", "", false, "")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	b.ReportAllocs()
	for b.Loop() {
		families, err := reg.Gather()
		if err != nil || len(families) != 7 {
			b.Fatalf("%d families, %v", len(families), err)
		}
	}
}
