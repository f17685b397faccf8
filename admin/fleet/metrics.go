package fleet

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Backend kinds: they name the backend's metrics
// (sluice_fleet_<kind>_errors_total, _seconds, _up).
const (
	BackendRedis    = "redis"
	BackendPostgres = "postgres"
)

// Request results, the values of sluice_fleet_rls_requests_total's label.
const (
	RequestOK          = "ok"          // every descriptor within its limit
	RequestOverLimit   = "over_limit"  // at least one descriptor over its limit
	RequestInvalid     = "invalid"     // INVALID_ARGUMENT: empty domain, malformed descriptor, ...
	RequestUnavailable = "unavailable" // UNAVAILABLE: the backend failed or timed out
	RequestAbandoned   = "abandoned"   // the caller gave up (its timeout) before the answer: grants given back
)

// Descriptor results, the values of sluice_fleet_rls_descriptors_total's label.
const (
	DescriptorOK        = "ok"
	DescriptorOverLimit = "over_limit"
	DescriptorReturn    = "return"    // unused tokens given back
	DescriptorCharge    = "charge"    // a cost the response reported, taken into the bucket's debt
	DescriptorBlock     = "block"     // a block op (sluice_op=block), whether it blocked or not
	DescriptorUnlimited = "unlimited" // unknown rule without a limit override: OK, no limit
)

// otherRule labels tokens of descriptors that do not name a global rule of
// the current policy (limit overrides): rule names sent by clients are
// unbounded and must not become label values.
const otherRule = "(other)"

// Metrics are the RLS's Prometheus metrics. Register them in the admin's
// registry (telemetry.Metrics.Registry()).
type Metrics struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	tokens      *prometheus.CounterVec
	blocks      *prometheus.CounterVec
	redisErrors *prometheus.CounterVec
	redisTime   prometheus.Histogram
	backend     string
}

// NewMetrics returns the metrics of a server with the Redis backend.
func NewMetrics() *Metrics { return NewMetricsFor(BackendRedis) }

// NewMetricsFor returns the metrics of a server whose backend is of kind
// backend (BackendRedis, BackendPostgres).
func NewMetricsFor(backend string) *Metrics {
	what := map[string]string{BackendRedis: "Redis", BackendPostgres: "PostgreSQL"}[backend]
	if what == "" {
		what = backend
	}
	m := &Metrics{backend: backend,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fleet_rls_requests_total",
			Help: "ShouldRateLimit calls by result: ok, over_limit, invalid (INVALID_ARGUMENT), unavailable (" + what + " failed or timed out: UNAVAILABLE), abandoned (the caller gave up before the answer; its grants were given back).",
		}, []string{"result"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fleet_rls_descriptors_total",
			Help: "Descriptors answered, by result: ok, over_limit, return (unused tokens given back), charge (a cost the response reported, taken into the bucket's debt), block (a block op, whether it blocked or not), unlimited (no global rule and no limit override: OK without a limit).",
		}, []string{"result"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fleet_tokens_total",
			Help: "Tokens of global rules by rule and decision: granted, denied (asked for and refused), returned, charged (costs the response reported, taken into the bucket's debt, as asked), clamped (the part of those charges the debt's cap, max_debt, dropped). Rule (other) is descriptors with a limit override.",
		}, []string{"rule", "decision"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fleet_blocks_total",
			Help: "Blocks put in place by global token-bucket rules with block_seconds, by rule: identities refused while their bucket could not pay, put block_seconds below empty (a block op that found the identity blocked already, or able to pay, is not counted).",
		}, []string{"rule"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fleet_" + backend + "_errors_total",
			Help: "Failed " + what + " batches by kind: timeout (the -" + backend + "-timeout budget ran out) or error.",
		}, []string{"kind"}),
		redisTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_fleet_" + backend + "_seconds",
			Help:    "Time of one " + what + " batch (all descriptors of a ShouldRateLimit call, one round trip), successful or not.",
			Buckets: []float64{100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3},
		}),
	}
	for _, r := range []string{RequestOK, RequestOverLimit, RequestInvalid, RequestUnavailable} {
		m.requests.WithLabelValues(r)
	}
	for _, r := range []string{DescriptorOK, DescriptorOverLimit, DescriptorReturn, DescriptorCharge, DescriptorBlock, DescriptorUnlimited} {
		m.descriptors.WithLabelValues(r)
	}
	for _, k := range []string{"timeout", "error"} {
		m.redisErrors.WithLabelValues(k)
	}
	return m
}

// Register adds the metrics, and the gauges of s, to reg.
func (m *Metrics) Register(reg prometheus.Registerer, s *Server) error {
	cs := []prometheus.Collector{m.requests, m.descriptors, m.tokens, m.blocks, m.redisErrors, m.redisTime}
	if s != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_fleet_nodes",
				Help: "Distinct nodes (x-sluice-node) that called the RLS of this admin in the last 30 s, all domains.",
			}, func() float64 { return float64(s.fleet.nodeCount()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_fleet_" + m.backend + "_up",
				Help: "1 when the last batch or health check of this admin on its backend succeeded, else 0.",
			}, func() float64 {
				if s.Health().Up {
					return 1
				}
				return 0
			}))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Metrics returns the server's metrics (to register them).
func (s *Server) Metrics() *Metrics { return s.metrics }
