package policy

import "strconv"

// Fleet mode: rules with "scope": "global" share one limit across
// every Envoy process connected to the same rate limit service (Envoy's RLS
// API v3, ShouldRateLimit). Each process leases tokens from the global
// bucket into a local pool; docs/filter.md "Fleet mode" has the protocol.

// Rule scopes.
const (
	ScopeLocal  = "local"  // the limit holds per Envoy process (default)
	ScopeGlobal = "global" // the limit holds across the fleet
)

// On-backend-down modes ("on_backend_down").
const (
	BackendDownLocalShare = "local_share" // each process enforces rate/N, burst/N
	BackendDownAllow      = "allow"       // admit everything the rule would limit
	BackendDownDeny       = "deny"        // reject everything the rule would limit
)

// Fleet configures the rate limit service of global rules.
type Fleet struct {
	Cluster        string // "cluster", required: the Envoy cluster (HTTP/2) of the RLS
	Authority      string // "authority", default "sluice-rls"
	Domain         string // "domain", default "sluice": RateLimitRequest.domain
	TimeoutMS      int    // "timeout_ms", default 100: one RLS call (and a paused request's wait)
	SyncIntervalMS int    // "sync_interval_ms", default 250: refill/return period per process
	LeaseMin       int    // "lease_min", default 1: the smallest lease asked for one key
	LeaseMax       int    // "lease_max", default 1000: the largest lease held for one key
	LeaseTTLMS     int    // "lease_ttl_ms", default 10000: leased tokens unspent after this are dropped
	OnBackendDown  string // "on_backend_down", default "local_share"
	FleetSize      int    // "fleet_size", default 0: N for local_share (0: the size the backend last reported, else 1)
}

// Fleet defaults and bounds.
const (
	DefaultFleetAuthority    = "sluice-rls"
	DefaultFleetDomain       = "sluice"
	DefaultFleetTimeout      = 100
	MaxFleetTimeout          = 10000
	DefaultFleetSyncInterval = 250
	MinFleetSyncInterval     = 10
	MaxFleetSyncInterval     = 60000
	DefaultLeaseMin          = 1
	DefaultLeaseMax          = 1000
	MaxLease                 = 1000000000
	DefaultLeaseTTL          = 10000
	MaxLeaseTTL              = 3600000
	MaxFleetSize             = 100000
)

var fleetFields = []string{"cluster", "authority", "domain", "timeout_ms", "sync_interval_ms",
	"lease_min", "lease_max", "lease_ttl_ms", "on_backend_down", "fleet_size"}

// fleet parses the optional top-level "fleet" object.
func (p *parser) fleet(path string, v *jvalue) *Fleet {
	if v.kind != jObject {
		p.errorf(path, `must be an object such as {"cluster": "sluice_rls"}, got `, v.kind.String())
		return nil
	}
	f := p.object(path, v, fleetFields)
	fl := &Fleet{
		Authority: DefaultFleetAuthority, Domain: DefaultFleetDomain, TimeoutMS: DefaultFleetTimeout,
		SyncIntervalMS: DefaultFleetSyncInterval, LeaseMin: DefaultLeaseMin, LeaseMax: DefaultLeaseMax,
		LeaseTTLMS: DefaultLeaseTTL, OnBackendDown: BackendDownLocalShare,
	}
	if s, ok := p.printable(path, f, "cluster", "the name of the Envoy cluster (HTTP/2) of the rate limit service", true); ok {
		fl.Cluster = s
	}
	if s, ok := p.printable(path, f, "authority", "the :authority of the RLS calls (default "+DefaultFleetAuthority+")", false); ok {
		fl.Authority = s
	}
	if s, ok := p.printable(path, f, "domain", "the RateLimitRequest domain (default "+DefaultFleetDomain+")", false); ok {
		fl.Domain = s
	}
	intField := func(name string, dst *int, lo, hi int, what string) bool {
		iv := f[name]
		if iv == nil {
			return true
		}
		n, ok := p.integer(join(path, name), iv, lo, hi, "an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi)+" ("+what+")")
		if ok {
			*dst = n
		}
		return ok
	}
	okT := intField("timeout_ms", &fl.TimeoutMS, 1, MaxFleetTimeout, "milliseconds; default "+strconv.Itoa(DefaultFleetTimeout))
	okS := intField("sync_interval_ms", &fl.SyncIntervalMS, MinFleetSyncInterval, MaxFleetSyncInterval,
		"milliseconds between lease syncs of a process; default "+strconv.Itoa(DefaultFleetSyncInterval))
	okMin := intField("lease_min", &fl.LeaseMin, 1, MaxLease, "tokens; default "+strconv.Itoa(DefaultLeaseMin))
	okMax := intField("lease_max", &fl.LeaseMax, 1, MaxLease, "tokens; default "+strconv.Itoa(DefaultLeaseMax))
	okTTL := intField("lease_ttl_ms", &fl.LeaseTTLMS, 1, MaxLeaseTTL, "milliseconds; default "+strconv.Itoa(DefaultLeaseTTL))
	intField("fleet_size", &fl.FleetSize, 0, MaxFleetSize, "the number of Envoy processes for local_share; 0, the default, uses the size the backend last reported")
	if mv := f["on_backend_down"]; mv != nil {
		switch {
		case mv.kind == jString && (mv.s == BackendDownLocalShare || mv.s == BackendDownAllow || mv.s == BackendDownDeny):
			fl.OnBackendDown = mv.s
		default:
			got := mv.kind.String()
			if mv.kind == jString {
				got = quoteShort(mv.s)
			}
			p.errorf(join(path, "on_backend_down"), `must be "local_share" (the default), "allow" or "deny", got `, got)
		}
	}
	if okT && okS && fl.TimeoutMS >= fl.SyncIntervalMS {
		p.errorf(join(path, "timeout_ms"), strconv.Itoa(fl.TimeoutMS), " must be less than sync_interval_ms (",
			strconv.Itoa(fl.SyncIntervalMS), ") so that at most one sync per process is in flight")
	}
	if okMin && okMax && fl.LeaseMin > fl.LeaseMax {
		p.errorf(join(path, "lease_min"), strconv.Itoa(fl.LeaseMin), " is above lease_max (", strconv.Itoa(fl.LeaseMax), ")")
	}
	if okS && okTTL && fl.LeaseTTLMS <= 2*fl.SyncIntervalMS {
		p.errorf(join(path, "lease_ttl_ms"), strconv.Itoa(fl.LeaseTTLMS), " must be more than twice sync_interval_ms (",
			strconv.Itoa(fl.SyncIntervalMS), ") so that a lease outlives the syncs that refill it")
	}
	return fl
}

// printable reads an optional or required string field of printable ASCII,
// at most 1024 bytes.
func (p *parser) printable(path string, f map[string]*jvalue, name, what string, required bool) (string, bool) {
	fp := join(path, name)
	sv := f[name]
	switch {
	case sv == nil:
		if required {
			p.errorf(fp, "missing; ", what)
		}
		return "", false
	case sv.kind != jString:
		p.errorf(fp, "must be a string: ", what, "; got ", sv.kind.String())
		return "", false
	case sv.s == "":
		p.errorf(fp, "is empty; ", what)
		return "", false
	case len(sv.s) > 1024:
		p.errorf(fp, "is too long (", strconv.Itoa(len(sv.s)), " bytes, at most 1024)")
		return "", false
	}
	for i := 0; i < len(sv.s); i++ {
		if c := sv.s[i]; c < 0x21 || c > 0x7e {
			p.errorf(fp, "contains a space, control or non-ASCII character at byte ", strconv.Itoa(i))
			return "", false
		}
	}
	return sv.s, true
}

// scope parses a rule's "scope"; it returns true for "global".
func (p *parser) scope(path string, v *jvalue) bool {
	switch {
	case v.kind == jString && v.s == ScopeLocal:
		return false
	case v.kind == jString && v.s == ScopeGlobal:
		p.globalPaths = append(p.globalPaths, path)
		return true
	}
	got := v.kind.String()
	if v.kind == jString {
		got = quoteShort(v.s)
	}
	p.errorf(path, `must be "local" (the default: the limit holds per Envoy process) or "global" (across the fleet; needs a top-level "fleet"), got `, got)
	return false
}

// checkScopeAlgorithm: global rules support every algorithm but
// concurrency. Not delayed admission (a held request would wait for a lease
// and for its turn). A global token bucket or quota may charge a cost read
// from the response (what its pool cannot cover goes to the rate limit
// service as a charge, into the bucket's debt or beyond the quota's limit);
// the windows take request costs only, local or global. Global windows and
// quotas count whole requests: limit >= 1 (and a rolling window's
// max_per_period, when set).
func (p *parser) checkScopeAlgorithm(path string, r *Rule) {
	if !r.Global {
		return
	}
	for _, k := range r.Keys {
		if k.Kind == SourceConnection {
			p.errorf(join(path, "scope"), `"global" cannot key by "connection": a connection's number is unique only within one Envoy, so across the fleet different clients would share a bucket; make the rule "local"`)
		}
	}
	cfgPath := join(path, "algorithm_config")
	switch {
	case r.TokenBucket != nil:
		if r.TokenBucket.MaxDelayMS > 0 {
			p.errorf(join(cfgPath, "max_delay_ms"), `delayed admission is not supported on a "global" rule; remove max_delay_ms or make the rule "local"`)
		}
	case r.Algorithm == AlgorithmConcurrency:
		p.errorf(join(path, "scope"), `"global" is not supported by a concurrency rule: requests in flight are counted per Envoy process; make the rule "local"`)
	case r.Window != nil:
		p.checkGlobalCount(join(cfgPath, "limit"), r.Window.Limit)
		if r.Window.MaxPerPeriod > 0 {
			p.checkGlobalCount(join(cfgPath, "max_per_period"), r.Window.MaxPerPeriod)
		}
	case r.Quota != nil:
		p.checkGlobalCount(join(cfgPath, "limit"), r.Quota.Limit)
	}
}

// checkGlobalCount: the rate limit service counts a global window in whole
// requests, so its limit must allow at least one.
func (p *parser) checkGlobalCount(path string, limit float64) {
	if limit < 1 {
		p.errorf(path, strconv.FormatFloat(limit, 'g', -1, 64), ` is below 1; a "global" window counts whole requests across the fleet, so its limit must be at least 1`)
	}
}

// checkGlobalRules: a global rule needs a "fleet" block to reach the RLS.
func (p *parser) checkGlobalRules(haveFleet bool) {
	if haveFleet {
		return
	}
	for _, gp := range p.globalPaths {
		p.errorf(gp, `"global" needs a top-level "fleet" object naming the rate limit service cluster, e.g. {"fleet": {"cluster": "sluice_rls"}}`)
	}
}
