package xds

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The xDS metrics tell whether every Envoy runs the policy the admin
// publishes. They are read from the server's state when scraped, so they
// cost nothing between scrapes, and a node the server forgets (see
// Options.MaxNodes) takes its series with it.
var (
	descPublished = prometheus.NewDesc("sluice_xds_published_version",
		"Policy version the admin publishes over xDS (0: none yet). During a shadow trial, the version the trial runs over.", nil, nil)
	descTrial = prometheus.NewDesc("sluice_xds_trial_active",
		"1 while the admin publishes a shadow trial's configuration in place of the current version.", nil, nil)
	descConnected = prometheus.NewDesc("sluice_xds_node_connected",
		"1 while the node has an xDS stream open to this admin.", []string{"node"}, nil)
	descCurrent = prometheus.NewDesc("sluice_xds_node_current",
		"1 when the node has accepted (ACKed) the configuration this admin publishes now.", []string{"node"}, nil)
	descAcked = prometheus.NewDesc("sluice_xds_node_acked_version",
		"Policy version the node last accepted (a trial counts as the version it runs over); absent until it accepts one.", []string{"node"}, nil)
	descRejected = prometheus.NewDesc("sluice_xds_node_rejected",
		"1 while the node's last answer to a configuration was a rejection (NACK) that no newer accepted version has resolved; it keeps enforcing the version it accepted before.", []string{"node"}, nil)
	descNacks = prometheus.NewDesc("sluice_xds_nacks_total",
		"Configurations the node rejected (NACK) since this admin first saw it.", []string{"node"}, nil)
)

// Collector returns the server's metrics, to register in the admin's
// registry.
func (s *Server) Collector() prometheus.Collector { return serverCollector{s} }

type serverCollector struct{ s *Server }

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPublished, descTrial, descConnected, descCurrent, descAcked, descRejected, descNacks} {
		ch <- d
	}
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	published, current, trial := c.s.serving()
	ch <- prometheus.MustNewConstMetric(descPublished, prometheus.GaugeValue, float64(published))
	ch <- prometheus.MustNewConstMetric(descTrial, prometheus.GaugeValue, flag(trial))
	for _, n := range c.s.nodes.counts() {
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, flag(n.Connected), n.ID)
		ch <- prometheus.MustNewConstMetric(descCurrent, prometheus.GaugeValue, flag(current != "" && n.AckedVersion == current), n.ID)
		if v, ok := policyNumber(n.AckedVersion); ok {
			ch <- prometheus.MustNewConstMetric(descAcked, prometheus.GaugeValue, float64(v), n.ID)
		}
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.GaugeValue, flag(n.NackedVersion != ""), n.ID)
		ch <- prometheus.MustNewConstMetric(descNacks, prometheus.CounterValue, float64(n.nacks), n.ID)
	}
}

// serving returns the policy version published, the resource version the
// snapshot holds now ("" before the first publish), and whether that is
// a trial's.
func (s *Server) serving() (published int64, current string, trial bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published, s.current, s.trial
}

// policyNumber reads the policy version of a resource version: a number,
// followed by a trial's "+trial<n>" and resets' "+resets.<hash>", if any.
// Versions of another server (an Envoy that last talked to another
// control plane) are not numbers.
func policyNumber(version string) (int64, bool) {
	base, _, _ := strings.Cut(version, "+")
	n, err := strconv.ParseInt(base, 10, 64)
	return n, err == nil && n > 0
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
