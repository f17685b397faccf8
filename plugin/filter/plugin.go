// Package filter is the Sluice proxy-wasm HTTP filter: token-bucket rate
// limiting with state in proxy-wasm shared data, so every worker thread of an
// Envoy shares the same buckets.
//
// How a request flows (docs/filter.md has the long version):
//
//  1. on_request_headers: for every policy, the first rule whose match holds
//     and whose limit keys are all present applies. For each applying rule
//     the bucket of the identity (the composite key) is found in shared
//     data, in its group tb:{rule}:#{group} of four buckets (bounded, the
//     default) or at tb:{rule}:{composite_key} (max_keys 0), see store.go,
//     and limiter.TokenBucket.Take decides (phase 1, no writes).
//  2. If an enforce-mode rule refuses, nothing is written and a 429 local
//     reply is sent. Otherwise each admitting rule's new state is committed
//     with CAS (phase 2); a CAS mismatch re-reads and re-decides that rule,
//     and a rule that now refuses rolls back (refunds) the rules already
//     committed before the 429: a rejected request consumes from no rule.
//  3. on_response_headers: the RateLimit fields of the most restrictive
//     enforce rule are added to allowed responses; the filter's own 429 is
//     left alone.
//
// Shared-data errors fail open for the rule concerned (store.go), and every
// callback recovers from panics and lets the request through: the filter
// never blocks traffic because of its own failure and never traps the VM.
package filter

import (
	"errors"
	"strconv"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// NewVMContext returns the filter's VM context; plugin/main.go registers it.
func NewVMContext() types.VMContext { return &vmContext{} }

// vmContext is per VM (one per Envoy worker thread). It outlives root
// contexts: metric ids and the log limiter are kept across reconfigurations.
type vmContext struct {
	types.DefaultVMContext
	// hashKey keys identity fingerprints (hashseed.go): the deployment's,
	// read once (seedOK) and kept for the VM's life.
	hashKey  state.HashKey
	seedOK   bool
	seedTry  float64 // when loading it last failed (unix seconds)
	seedBuf  []byte
	counters map[metricKey]counter // and gauges
	global   *globalMetrics
	logs     logLimiter
	tallies  map[string]*ruleTally // telemetry.go: cumulative per-rule counters
	tel      telemetryState        // telemetry.go
	held     int                   // delay.go: streams held on this VM
	fleet    fleetState            // fleet_sync.go
	walks    []ruleWalk            // resets_all.go: resets of every identity of a rule, in progress
}

func (vm *vmContext) NewPluginContext(contextID uint32) types.PluginContext {
	return &pluginContext{vm: vm, id: contextID}
}

// pluginContext is a root context: one configuration. Envoy creates a new
// one per configuration update; if its on_configure fails, the previous one
// stays in force.
type pluginContext struct {
	types.DefaultPluginContext
	vm  *vmContext
	id  uint32          // the root context id
	cfg *compiledConfig // nil until configured
	hq  holdQueue       // delay.go: held streams
	tk  tickSchedule    // tick.go: on_tick's clients and period

	free []*httpContext // recycled HTTP contexts

	calls []*syncBatch // fleet calls this root context sent, not answered yet (done.go)

	requestScratch
}

// requestScratch is a root context's per-request scratch, reused from one
// request to the next (a VM runs one callback at a time, so one set
// serves every stream): what a request leaves here is overwritten by the
// next and must not be kept beyond the callback that wrote it.
type requestScratch struct {
	rs      requestSources
	apps    []application
	act     *compiledRule // the exempt or deny rule selectRules found (actions.go), else nil
	comps   []string
	compBuf []byte
	valBuf  []byte
	recBuf  []byte // a group's new record (store.go)
	hdrBuf  []byte
	// replyHdrs are a local reply's fields (headers.go), reused.
	replyHdrs [][2]string
	shadow    []byte
	// bodyBuf receives the response body chunks read for response_json
	// rules (body.go), reused.
	bodyBuf []byte
	// chargeApp is the scratch of a response-phase charge (charge.go).
	chargeApp application
	// shadowEx is the first applying exempt rule in shadow mode, else nil:
	// it exempts the request from shadow rules only (actions.go).
	shadowEx *compiledRule
	// clockNS is the clock as the request's decision read it (Unix
	// nanoseconds), 0 until read: a rule for a time and the algorithms
	// read it once between them (nowNS).
	clockNS int64
}

// nowNS reads the clock once per decision (selectRules resets it).
func (p *pluginContext) nowNS() int64 {
	if p.clockNS == 0 {
		p.clockNS = nowNanos()
	}
	return p.clockNS
}

// OnPluginStart is proxy_on_configure: parse and validate the plugin
// configuration with the same code the admin uses. On any problem, every
// problem is logged at error level with its JSON path and false is returned,
// so Envoy keeps the previous configuration. Buckets are never reset by a
// new configuration (they live in shared data keyed by rule name), only by
// the resets it carries (resets.go).
func (p *pluginContext) OnPluginStart(int) (ok types.OnPluginStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_configure", r)
			ok = types.OnPluginStartStatusFailed
		}
	}()
	data, err := getPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		logError("sluice: cannot read the plugin configuration: " + err.Error())
		p.vm.globals().configRejected.inc()
		return types.OnPluginStartStatusFailed
	}
	cfg, err := policy.Parse(data)
	if err != nil || cfg == nil {
		logConfigErrors(err)
		p.vm.globals().configRejected.inc()
		return types.OnPluginStartStatusFailed
	}
	if cfg.Telemetry, err = resolveTelemetryToken(cfg.Telemetry, getenv); err != nil {
		logConfigErrors(err)
		p.vm.globals().configRejected.inc()
		return types.OnPluginStartStatusFailed
	}
	p.vm.globals() // define the global counters up front
	if !p.vm.seedOK {
		p.vm.loadHashSeed() // normally done in on_vm_start
	}
	p.cfg = compile(cfg, p.vm)
	p.cfg.hash = configHash(data)
	p.apps = make([]application, 0, len(p.cfg.policies))
	p.applyResets(cfg.Resets) // resets.go
	if p.cfg.fleet != nil {
		p.startFleet() // fleet_sync.go
	}
	if p.cfg.telemetry != nil {
		p.startTelemetry()
	}
	p.settleTick() // tick.go: the period this configuration needs
	logInfo("sluice: configuration loaded: " + strconv.Itoa(len(p.cfg.policies)) +
		" policies, " + strconv.Itoa(len(p.cfg.rules)) + " rules")
	return types.OnPluginStartStatusOK
}

func logConfigErrors(err error) {
	var fes policy.Errors
	switch {
	case errors.As(err, &fes) && len(fes) > 0:
		for _, fe := range fes {
			logError("sluice: invalid configuration: " + fe.Error())
		}
	case err != nil:
		logError("sluice: invalid configuration: " + err.Error())
	default:
		logError("sluice: invalid configuration")
	}
}

// recovered logs a recovered panic (rate-limited) and counts it.
func (vm *vmContext) recovered(where string, r any) {
	vm.globals().panicsRecovered.inc()
	msg := "sluice: recovered from a panic in " + where + "; request let through"
	if e, ok := r.(error); ok {
		msg += ": " + e.Error()
	} else if s, ok := r.(string); ok {
		msg += ": " + s
	}
	vm.logLimited(logPanic, msg)
}
