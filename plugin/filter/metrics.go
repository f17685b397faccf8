package filter

// Metrics are proxy-wasm counters (Envoy stats; Envoy shows custom wasm
// metrics under the "wasmcustom." prefix). Per rule:
//
//	sluice.rule.<rule>.allowed         the rule admitted the request and its tokens were committed
//	sluice.rule.<rule>.near_limit      of those, the ones that left the identity less than a fifth of
//	                                   what it can spend at once (compiledRule.capacity; over 80% used,
//	                                   envoyproxy/ratelimit's near_limit); local rules only
//	sluice.rule.<rule>.rejected        the rule (enforce mode) refused the request
//	sluice.rule.<rule>.shadow_rejected the rule (shadow mode) would have refused it
//	sluice.rule.<rule>.fail_open       shared data failed (error or CAS retries exhausted):
//	                                   the rule was skipped for the request
//	sluice.rule.<rule>.cas_retries     CAS mismatches on the rule's buckets (each one re-read and retried)
//	sluice.rule.<rule>.key_missing     the rule matched but a limit key was missing, so it was skipped
//	sluice.rule.<rule>.overflowed      bounded mode: requests decided by their group's overflow limit
//	                                   (allowed or refused): the identity found every way of its group
//	                                   holding another identity's active state (more than four
//	                                   identities of a group active at once; raise max_keys)
//	sluice.rule.<rule>.overflow_identities  (gauge) bounded mode: the estimated number of distinct
//	                                   identities sharing the overflow limit of the group at the
//	                                   most recent overflow decision
//	sluice.rule.<rule>.global_evicted  fleet mode, bounded: a new identity's lease pool replaced the
//	                                   live pool of another identity (every way of its group held one)
//	sluice.rule.<rule>.delayed         max_delay_ms: the rule reserved tokens for a request that
//	                                   was held (also counted in allowed)
//	sluice.rule.<rule>.delay_ms        the sum of those reservations' delays, in ms (rounded up)
//	sluice.rule.<rule>.shadow_delayed  the rule (shadow mode) reserved; the request was not held
//	sluice.rule.<rule>.exempted        an exempt rule applied: no rule (in shadow mode: no shadow rule) limited the request; an unlimited rule applied: no rule of its policy did
//	sluice.rule.<rule>.denied          a deny rule (enforce mode) rejected the request
//	sluice.rule.<rule>.overridden      the rule decided a request with an override's limits
//	                                   (the last three are defined only for rules that have them)
//
// and for the whole filter:
//
//	sluice.config_rejected   on_configure rejected a configuration
//	sluice.panics_recovered  a callback panicked; the request was let through
//	sluice.refund_failed     a refund (after a late rejection) could not be written
//	sluice.delay.cancelled   a held request's stream ended before its time; tokens refunded
//	sluice.delay.queue_full  a request to be held was rejected: the VM held maxHeld already
//	sluice.hash_seed_failed  the deployment's hash key (sluice:hash-seed) could not be read or
//	                         created; bounded rules fail open until it can (hashseed.go)
//
// and, when telemetry is configured (telemetry.go):
//
//	sluice.telemetry.sent     reports dispatched
//	sluice.telemetry.dropped  reports not delivered (dispatch error, failure, timeout, non-2xx)
//	sluice.telemetry.skipped  ticks skipped because the VM's previous report was in flight
//
// Counters are defined once per VM and name (vmContext.counter caches the
// ids), at configuration time, never per request. A reconfiguration that
// keeps a rule name keeps counting into the same stat.
type ruleMetrics struct {
	allowed, nearLimit, rejected, shadowRejected, failOpen, casRetries, keyMissing, overflowed counter
	delayed, delayMS, shadowDelayed                                                            counter
	blocked                                                                                    counter // block.go
	exempted, denied, overridden                                                               counter // actions.go
	overflowIdentities                                                                         gauge
}

type globalMetrics struct {
	configRejected, panicsRecovered, refundFailed  counter
	delayCancelled, delayQueueFull, hashSeedFailed counter
	resetApplied, resetFailed                      counter // resets.go
}

func (vm *vmContext) ruleMetrics(rule string) ruleMetrics {
	p := "sluice.rule." + rule + "."
	return ruleMetrics{
		allowed:        vm.counter(p + "allowed"),
		nearLimit:      vm.counter(p + "near_limit"),
		rejected:       vm.counter(p + "rejected"),
		shadowRejected: vm.counter(p + "shadow_rejected"),
		failOpen:       vm.counter(p + "fail_open"),
		casRetries:     vm.counter(p + "cas_retries"),
		keyMissing:     vm.counter(p + "key_missing"),
		overflowed:     vm.counter(p + "overflowed"),
		delayed:        vm.counter(p + "delayed"),
		delayMS:        vm.counter(p + "delay_ms"),
		shadowDelayed:  vm.counter(p + "shadow_delayed"),
		blocked:        vm.counter(p + "blocked"),

		overflowIdentities: vm.gauge(p + "overflow_identities"),
	}
}

func (vm *vmContext) globals() *globalMetrics {
	if vm.global == nil {
		vm.global = &globalMetrics{
			configRejected:  vm.counter("sluice.config_rejected"),
			panicsRecovered: vm.counter("sluice.panics_recovered"),
			refundFailed:    vm.counter("sluice.refund_failed"),
			delayCancelled:  vm.counter("sluice.delay.cancelled"),
			delayQueueFull:  vm.counter("sluice.delay.queue_full"),
			hashSeedFailed:  vm.counter("sluice.hash_seed_failed"),
			resetApplied:    vm.counter("sluice.resets_applied"),
			resetFailed:     vm.counter("sluice.resets_failed"),
		}
	}
	return vm.global
}

// counter and gauge are defined metrics, or the zero value when the host
// refused the definition (then updates are no-ops).
type counter struct {
	id uint32
	ok bool
}

type gauge counter

// counter returns the cached counter for name, defining it on first use.
func (vm *vmContext) counter(name string) counter {
	return vm.metric(name, false)
}

// gauge returns the cached gauge for name, defining it on first use.
func (vm *vmContext) gauge(name string) gauge {
	return gauge(vm.metric(name, true))
}

// metric returns the cached metric for name (a gauge or a counter: the
// cache is keyed by kind too), defining it on first use.
func (vm *vmContext) metric(name string, isGauge bool) counter {
	k := metricKey{name, isGauge}
	if c, ok := vm.counters[k]; ok {
		return c
	}
	c := defineMetric(name, isGauge)
	if vm.counters == nil {
		vm.counters = make(map[metricKey]counter)
	}
	vm.counters[k] = c
	return c
}

type metricKey struct {
	name    string
	isGauge bool
}

func defineMetric(name string, isGauge bool) (c counter) {
	defer func() {
		if r := recover(); r != nil { // the SDK panics when the host refuses
			logWarn("sluice: cannot define metric " + name)
			c = counter{}
		}
	}()
	if isGauge {
		return counter{id: defineGauge(name), ok: true}
	}
	return counter{id: defineCounter(name), ok: true}
}

// set records v, ignoring host errors.
func (g gauge) set(v int64) {
	if g.ok {
		recordMetric(g.id, uint64(v))
	}
}

// inc adds one. A host error is ignored: a metric must never break a
// request.
func (c counter) inc() {
	if c.ok {
		incrementMetric(c.id, 1)
	}
}

// add adds n (nothing when n is 0).
func (c counter) add(n uint64) {
	if c.ok && n > 0 {
		incrementMetric(c.id, int64(n))
	}
}

// logLimiter rate-limits repetitive warnings (fail-open, shadow
// rejections, corrupt state, overflow decisions): at most one line per category per
// interval, with the number of suppressed lines. Counters carry the exact
// numbers. Times are unix seconds from the WASI realtime clock (nowSeconds,
// one host call; time.Now would make two).
type logLimiter struct {
	last       [numLogKinds]float64
	logged     [numLogKinds]bool
	suppressed [numLogKinds]int
}

type logKind int

const (
	logFailOpen logKind = iota
	logShadow
	logCorrupt
	logRefund
	logPanic
	logOverflow
	logTelemetry
	logFleet
	logBody
	numLogKinds
)

const logInterval = 10 // seconds

// allow reports whether a line of this kind may be logged now, and how many
// were suppressed since the last one. A clock that went backwards allows a
// line (and restarts the interval).
func (l *logLimiter) allow(k logKind) (bool, int) { return l.allowAt(k, nowSeconds()) }

// allowAt is allow with the caller's reading of the clock, so a caller on
// the request path can check before building its message.
func (l *logLimiter) allowAt(k logKind, now float64) (bool, int) {
	if l.logged[k] && now-l.last[k] < logInterval && now >= l.last[k] {
		l.suppressed[k]++
		return false, 0
	}
	n := l.suppressed[k]
	l.last[k], l.logged[k], l.suppressed[k] = now, true, 0
	return true, n
}

// logLimited logs msg at warn (or info for shadow) level if the limiter
// allows it.
func (vm *vmContext) logLimited(k logKind, msg string) {
	ok, n := vm.logs.allow(k)
	if ok {
		vm.emit(k, msg, n)
	}
}

// emit logs a line the limiter allowed, with the suppressed count.
func (vm *vmContext) emit(k logKind, msg string, suppressed int) {
	if suppressed > 0 {
		msg += " (" + itoa(int64(suppressed)) + " similar messages suppressed)"
	}
	if k == logShadow {
		logInfo(msg)
	} else {
		logWarn(msg)
	}
}

func itoa(v int64) string { return string(appendDecimal(nil, v)) }
