package telemetry

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Report results, the values of sluice_telemetry_reports_total's result label.
const (
	ResultAccepted     = "accepted"     // applied
	ResultDuplicate    = "duplicate"    // seq already seen; ignored (204)
	ResultInvalid      = "invalid"      // 400
	ResultUnauthorized = "unauthorized" // 401
	ResultTooLarge     = "too_large"    // 413
	ResultBadMedia     = "unsupported"  // 415
	ResultRefused      = "refused"      // a new node or VM beyond the bounds; nothing applied (204)
)

var resultLabels = []string{ResultAccepted, ResultDuplicate, ResultInvalid, ResultUnauthorized, ResultTooLarge, ResultBadMedia, ResultRefused}

// Metrics is the admin's Prometheus registry: the telemetry (requests per
// rule, node and decision; node health), the ingestion itself, and the Go
// runtime and process collectors. It has its own registry, so nothing else
// in the process leaks into it. Per-identity data is never exported: its
// cardinality is unbounded.
type Metrics struct {
	reg     *prometheus.Registry
	reports *prometheus.CounterVec
	ingest  prometheus.Histogram
}

// NewMetrics returns the registry, exporting s.
func NewMetrics(s *State) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_telemetry_reports_total",
			Help: "Telemetry reports received by the admin, by result: accepted, duplicate (seq already seen), invalid (400), unauthorized (401), too_large (413), unsupported (415 media type), refused (a new node or VM beyond the telemetry bounds).",
		}, []string{"result"}),
		ingest: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_telemetry_ingest_seconds",
			Help:    "Time to read, validate and apply one telemetry report.",
			Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3},
		}),
	}
	for _, r := range resultLabels { // every result exists from the start, at 0
		m.reports.WithLabelValues(r)
	}
	m.reg.MustRegister(m.reports, m.ingest, &stateCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry (to add metrics or to gather in tests).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Report counts one report with its result (one of the Result* constants).
func (m *Metrics) Report(result string) { m.reports.WithLabelValues(result).Inc() }

// ObserveIngest records the time one report took.
func (m *Metrics) ObserveIngest(d time.Duration) { m.ingest.Observe(d.Seconds()) }

// Handler serves the metrics in the Prometheus text (or OpenMetrics) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

var (
	descRequests = prometheus.NewDesc("sluice_requests_total",
		"Requests seen by the plugin, per rule, node and decision (allowed, rejected, shadow_rejected, fail_open), counted by the admin from the reports since it first saw the node.",
		[]string{"rule", "node", "decision"}, nil)
	descOverflowed = prometheus.NewDesc("sluice_rule_overflowed_total",
		"Requests of the rule decided by a group's overflow limit (their identity found no place in the plugin's bounded table; each is also counted in sluice_requests_total), per rule and node, counted by the admin from the reports since it first saw the node.",
		[]string{"rule", "node"}, nil)
	descOverflowIdentities = prometheus.NewDesc("sluice_rule_overflow_identities",
		"Estimated distinct identities sharing one overflow limit of the rule: the most any running VM of the node saw in its last report (0: none). Above 0, the rule's max_keys is too small for its active identities.",
		[]string{"rule", "node"}, nil)
	descResponseCosts = prometheus.NewDesc("sluice_response_costs_total",
		"Charges of rules whose cost comes from the response, per rule, node and outcome: charged (every charge), default (charged default_cost: the response reported no cost, or the stream ended first), invalid (the reported value was not a cost; also counted in default). Counted by the admin from the reports since it first saw the node; only for rules that charged something.",
		[]string{"rule", "node", "outcome"}, nil)
	descKeyMissing = prometheus.NewDesc("sluice_rule_key_missing_total",
		"Requests the rule matched but skipped because one of its limit keys had no value (a header absent, metadata no filter wrote): a rule that never applies, or a client without its key. Per rule and node, counted by the admin from the reports since it first saw the node; only for rules that skipped something.",
		[]string{"rule", "node"}, nil)
	descOverridden = prometheus.NewDesc("sluice_rule_overridden_total",
		"Requests the rule decided with an override's limits (also counted in sluice_requests_total), per rule and node, since the admin first saw the node; only for rules that did.",
		[]string{"rule", "node"}, nil)
	descBlocked = prometheus.NewDesc("sluice_rule_blocked_total",
		"Identities the rule's refusals blocked (block_seconds), per rule and node, since the admin first saw the node; only for rules that did.",
		[]string{"rule", "node"}, nil)
	descExempted = prometheus.NewDesc("sluice_rule_exempted_total",
		"Requests an exempt rule let through, limited by no rule, per rule and node, since the admin first saw the node; only for rules that did.",
		[]string{"rule", "node"}, nil)
	descDenied = prometheus.NewDesc("sluice_rule_denied_total",
		"Requests a deny rule rejected, per rule and node, since the admin first saw the node; only for rules that did.",
		[]string{"rule", "node"}, nil)
	descLastReport = prometheus.NewDesc("sluice_node_last_report_timestamp_seconds",
		"When the admin last received a report from the node (unix seconds).", []string{"node"}, nil)
	descDropped = prometheus.NewDesc("sluice_telemetry_reports_dropped_total",
		"Reports the node's plugin failed to deliver (non-2xx, timeout, dispatch error), as the plugin counts them.", []string{"node"}, nil)
	descVMs = prometheus.NewDesc("sluice_node_vms",
		"Worker VMs of the node that reported within three intervals.", []string{"node"}, nil)
	descNodeConfig = prometheus.NewDesc("sluice_node_config_info",
		"The configuration the node runs: its hash, and the policy version with that hash (\"\" if none).", []string{"node", "config_hash", "version"}, nil)
	descBuckets = prometheus.NewDesc("sluice_telemetry_buckets",
		"Bucket states the admin holds (bounded).", nil, nil)
	descEvicted = prometheus.NewDesc("sluice_telemetry_buckets_evicted_total",
		"Bucket states forgotten to stay within the bound.", nil, nil)
	descNodes = prometheus.NewDesc("sluice_telemetry_nodes",
		"Nodes the admin holds (reported within the node TTL).", nil, nil)
	descRefused = prometheus.NewDesc("sluice_telemetry_refused_total",
		"New nodes, VMs and (VM, rule) pairs refused because the telemetry state was full of items that report (the bounds and -telemetry-max-bytes).", []string{"what"}, nil)
	descStateBytes = prometheus.NewDesc("sluice_telemetry_state_bytes",
		"Estimated memory of the telemetry state's nodes, VMs, baselines, series and rules (bucket states apart).", nil, nil)
	descStateMaxBytes = prometheus.NewDesc("sluice_telemetry_state_max_bytes",
		"The budget of sluice_telemetry_state_bytes (-telemetry-max-bytes).", nil, nil)
)

// stateCollector exports the State at scrape time: its series live and
// die with the nodes (a forgotten node's series disappear).
type stateCollector struct{ s *State }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descOverflowed, descOverflowIdentities, descKeyMissing, descOverridden, descExempted, descDenied, descBlocked, descResponseCosts, descLastReport, descDropped, descVMs, descNodeConfig, descBuckets, descEvicted, descNodes, descRefused, descStateBytes, descStateMaxBytes} {
		ch <- d
	}
	describeFleet(ch)
}

type nodeMetric struct {
	id, hash, version string
	last              time.Time
	dropped           uint64
	vms               int
}

type seriesMetric struct {
	rule, node string
	total      Counts
	overflowed uint64
	identities uint64
	acts       Actions
	resp       ResponseCosts
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	// Copy under the lock, send without it (the registry may be slow).
	s := c.s
	now := s.opts.Now()
	s.mu.Lock()
	nodes := make([]nodeMetric, 0, len(s.nodes))
	ser := make([]seriesMetric, 0, s.nseries)
	for _, n := range s.nodes {
		nv := s.nodeView(n, now, 0, -1)
		nm := nodeMetric{id: n.id, hash: n.configHash, last: n.last, dropped: n.dropped, vms: nv.VMs}
		if nv.Version > 0 {
			nm.version = strconv.FormatInt(nv.Version, 10)
		}
		nodes = append(nodes, nm)
		first := len(ser)
		for rule, se := range n.series {
			ser = append(ser, seriesMetric{rule: rule, node: n.id, total: se.total, overflowed: se.overflowed, acts: se.acts, resp: se.resp})
		}
		overflowIdentities(n, now, func(rule string, k uint64) {
			for i := first; i < len(ser); i++ {
				if ser[i].rule == rule {
					ser[i].identities = k
				}
			}
		})
	}
	buckets, evicted := s.buckets.len(), s.evicted
	refused, used := s.refused, s.used
	fleet := s.fleetViews(now)
	s.mu.Unlock()

	for _, sm := range ser {
		for d := range NumDecisions {
			ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(sm.total[d]), sm.rule, sm.node, d.String())
		}
		ch <- prometheus.MustNewConstMetric(descOverflowed, prometheus.CounterValue, float64(sm.overflowed), sm.rule, sm.node)
		ch <- prometheus.MustNewConstMetric(descOverflowIdentities, prometheus.GaugeValue, float64(sm.identities), sm.rule, sm.node)
		for _, a := range []struct {
			desc *prometheus.Desc
			n    uint64
		}{{descKeyMissing, sm.acts.KeyMissing}, {descOverridden, sm.acts.Overridden}, {descExempted, sm.acts.Exempted}, {descDenied, sm.acts.Denied},
			{descBlocked, sm.acts.Blocked}} {
			if a.n > 0 {
				ch <- prometheus.MustNewConstMetric(a.desc, prometheus.CounterValue, float64(a.n), sm.rule, sm.node)
			}
		}
		if r := sm.resp; r.Charged > 0 {
			for _, o := range []struct {
				name string
				n    uint64
			}{{"charged", r.Charged}, {"default", r.Default}, {"invalid", r.Invalid}} {
				ch <- prometheus.MustNewConstMetric(descResponseCosts, prometheus.CounterValue, float64(o.n), sm.rule, sm.node, o.name)
			}
		}
	}
	for _, n := range nodes {
		ch <- prometheus.MustNewConstMetric(descLastReport, prometheus.GaugeValue, float64(n.last.UnixMilli())/1000, n.id)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(n.dropped), n.id)
		ch <- prometheus.MustNewConstMetric(descVMs, prometheus.GaugeValue, float64(n.vms), n.id)
		ch <- prometheus.MustNewConstMetric(descNodeConfig, prometheus.GaugeValue, 1, n.id, n.hash, n.version)
	}
	ch <- prometheus.MustNewConstMetric(descBuckets, prometheus.GaugeValue, float64(buckets))
	ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(evicted))
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(len(nodes)))
	for what, n := range refused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), refusedNames[what])
	}
	ch <- prometheus.MustNewConstMetric(descStateBytes, prometheus.GaugeValue, float64(used))
	ch <- prometheus.MustNewConstMetric(descStateMaxBytes, prometheus.GaugeValue, float64(s.opts.MaxBytes))
	collectFleet(ch, fleet)
}
