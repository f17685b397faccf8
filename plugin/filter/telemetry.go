package filter

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/state"
	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

// Telemetry (docs/filter.md "Telemetry", contract D): when the configuration
// has a "telemetry" object, every worker VM reports to the admin from
// on_tick with dispatch_http_call: per rule cumulative counters since the VM
// started, and the hottest buckets touched since the last report.
//
// The request path only increments plain ints (ruleTally) and, when
// telemetry is on, records the touched bucket in a bounded per-VM table
// (hotTable): one map lookup. Everything else (sorting, masking, JSON) runs
// at tick time. Nothing is added to shared data. A report that fails, times
// out or gets a non-2xx answer is dropped and counted (reports_dropped, in
// the next report); at most one report per VM is in flight. Nothing here can
// affect traffic: every telemetry callback recovers from panics.

// ruleTally is a rule's cumulative counters in this VM, kept by rule name
// across reconfigurations (like the proxy-wasm metrics).
type ruleTally struct {
	name                                        string
	allowed, rejected, shadowRejected, failOpen uint64
	// overflowed counts requests decided by a group's overflow limit;
	// overflowIdentities is the largest estimate of identities sharing one
	// seen since the previous report (reset when a report is built).
	overflowed, overflowIdentities uint64
	// exempted, denied and overridden count requests an exempt rule let
	// through, a deny rule rejected, an override decided (actions.go).
	exempted, denied, overridden uint64
	// respCharged, respDefault and respInvalid count a response-charged
	// rule's charges, those of default_cost, and reports that were not a
	// cost (charge.go).
	respCharged, respDefault, respInvalid uint64
	// keyMissing counts requests the rule matched but skipped: a limit key
	// had no value (decide.go).
	keyMissing uint64
	// blocked counts the identities the rule's refusals blocked
	// (block_seconds, block.go).
	blocked uint64
}

// tally returns the VM's counters for rule name.
func (vm *vmContext) tally(name string) *ruleTally {
	if t := vm.tallies[name]; t != nil {
		return t
	}
	if vm.tallies == nil {
		vm.tallies = make(map[string]*ruleTally)
	}
	t := &ruleTally{name: name}
	vm.tallies[name] = t
	return t
}

// telemetryState is the per-VM reporting state.
type telemetryState struct {
	started    bool
	vmID       string
	vmStartMS  int64
	node       string
	seq        uint64
	dropped    uint64
	inflight   bool
	inflightAt float64        // seconds
	inflightBy *pluginContext // the root context that sent it (done.go)
	hot        hotTable
	body       []byte // reused report buffer
	sorted     []*hotEntry
	sent, skip counter
}

// hotKey identifies a bucket in the hot table: the rule's tally (one per
// rule name) and the identity.
type hotKey struct {
	t  *ruleTally
	id string
}

type hotEntry struct {
	key        hotKey
	rule       *compiledRule // for masking: its key sources and telemetry_identity
	tokens     float64
	burst      float64
	lastRefill float64
	rejects    uint64
}

// hotTable holds the buckets touched since the last report, at most cap
// entries. When full, a new identity that was rejected replaces the entry at
// a rotating cursor if that one has no rejects; otherwise it is not
// recorded. O(1) per request.
type hotTable struct {
	idx     map[hotKey]int
	entries []hotEntry
	cap     int
	cursor  int
}

func (h *hotTable) reset(capacity int) {
	if h.idx == nil || h.cap != capacity {
		h.idx = make(map[hotKey]int, capacity)
		h.entries = make([]hotEntry, 0, capacity)
		h.cap = capacity
	} else {
		clear(h.idx)
		clear(h.entries)
		h.entries = h.entries[:0]
	}
	h.cursor = 0
}

// touch records a's bucket state after a decision; rejected says the rule
// refused (or, in shadow mode, would have refused) the request.
func (h *hotTable) touch(a *application, rejected bool) {
	if h.cap == 0 {
		return
	}
	k := hotKey{t: a.rule.tc, id: a.identity}
	i, ok := h.idx[k]
	if !ok {
		if len(h.entries) < h.cap {
			i = len(h.entries)
			h.entries = append(h.entries, hotEntry{})
		} else {
			if !rejected {
				return
			}
			i = h.cursor
			h.cursor = (h.cursor + 1) % h.cap
			if h.entries[i].rejects > 0 {
				return
			}
			delete(h.idx, h.entries[i].key)
		}
		k.id = strings.Clone(a.identity) // the request's identity is a view of a reused buffer
		h.idx[k] = i
		h.entries[i] = hotEntry{key: k}
	}
	e := &h.entries[i]
	e.rule = a.rule
	e.burst = a.rule.capacity()
	if a.rule.win != nil {
		// A window reports the quota it has left as tokens and its limit
		// as burst (window.go), and the start of its current period.
		e.tokens, e.lastRefill = min(a.dec.Remaining, e.burst), a.ws.next.Start
	} else {
		e.tokens, e.lastRefill = a.next.Tokens, a.next.LastRefill
	}
	if rejected {
		e.rejects++
	}
}

// hotCapacity is the hot table's size for top_n.
func hotCapacity(topN int) int { return min(max(4*topN, 64), 4096) }

// startTelemetry runs in on_configure when the configuration has telemetry.
func (p *pluginContext) startTelemetry() {
	t := p.cfg.telemetry
	ts := &p.vm.tel
	if !ts.started {
		ts.started = true
		ts.vmID = strconv.FormatUint(rand.Uint64()^uint64(nowSeconds()*1e9), 16)
		ts.vmStartMS = int64(nowSeconds() * 1000)
		ts.sent = p.vm.counter("sluice.telemetry.sent")
		ts.skip = p.vm.counter("sluice.telemetry.skipped")
		p.vm.counter("sluice.telemetry.dropped")
	}
	ts.hot.reset(hotCapacity(t.TopN))
}

// report sends one report (from proxy_on_tick when due, see tick.go).
func (p *pluginContext) report() {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_tick", r)
		}
	}()
	if p.cfg == nil {
		return
	}
	if p.cfg.telemetry == nil {
		return
	}
	t, ts := p.cfg.telemetry, &p.vm.tel
	now := nowSeconds()
	if ts.inflight {
		// Envoy always answers a call (its timeout included) unless the
		// root context that sent it went away: give up on it after ten
		// intervals.
		if now-ts.inflightAt < 10*float64(t.IntervalMS)/1000 && now >= ts.inflightAt {
			ts.skip.inc()
			return
		}
		ts.inflight, ts.inflightBy = false, nil
		p.reportDropped()
	}
	if ts.node == "" {
		ts.node = "unknown"
		if v, ok := getProperty("node\x00id", nil); ok && len(v) > 0 {
			ts.node = string(v[:min(len(v), 256)])
		}
	}
	ts.seq++
	body := p.buildReport(now)
	ts.hot.reset(hotCapacity(t.TopN))
	headers := [][2]string{
		{":method", "POST"},
		{":path", t.Path},
		{":authority", t.Authority},
		{"content-type", "application/json"},
		{"authorization", "Bearer " + t.Token},
	}
	if err := dispatchHTTPCall(t.Cluster, headers, body, uint32(t.TimeoutMS), p.onReportResponse); err != nil {
		p.reportDropped()
		p.vm.logLimited(logTelemetry, "sluice: telemetry: cannot dispatch the report to cluster "+t.Cluster+": "+err.Error())
		return
	}
	ts.inflight, ts.inflightAt, ts.inflightBy = true, now, p
	ts.sent.inc()
}

func (p *pluginContext) reportDropped() {
	p.vm.tel.dropped++
	p.vm.counter("sluice.telemetry.dropped").inc()
}

// onReportResponse is the report's proxy_on_http_call_response.
func (p *pluginContext) onReportResponse(numHeaders, _, _ int) {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_http_call_response", r)
		}
	}()
	p.vm.tel.inflight, p.vm.tel.inflightBy = false, nil
	status := ""
	if numHeaders > 0 {
		if hs, err := httpCallResponseHeaders(); err == nil {
			for _, h := range hs {
				if h[0] == ":status" {
					status = h[1]
					break
				}
			}
		}
	}
	if len(status) != 3 || status[0] != '2' {
		p.reportDropped()
		if status == "" {
			status = "no response"
		}
		p.vm.logLimited(logTelemetry, "sluice: telemetry: report not accepted by the admin ("+status+"); dropped")
	}
}

// formatVersion is telfmt.FormatVersion as text; the two constants below
// stop the build if the shared format's version moves without it.
const formatVersion = "1"

const (
	_ uint = telfmt.FormatVersion - 1
	_ uint = 1 - telfmt.FormatVersion
)

// buildReport renders the report (contract D) into the reused buffer.
func (p *pluginContext) buildReport(now float64) []byte {
	t, ts := p.cfg.telemetry, &p.vm.tel
	b := ts.body[:0]
	b = append(b, `{"`+telfmt.FieldV+`":`+formatVersion+`,"`+telfmt.FieldNode+`":`...)
	b = appendJSONString(b, ts.node)
	b = append(b, `,"`+telfmt.FieldVM+`":`...)
	b = appendJSONString(b, ts.vmID)
	b = append(b, `,"`+telfmt.FieldVMStartMS+`":`...)
	b = strconv.AppendInt(b, ts.vmStartMS, 10)
	b = append(b, `,"`+telfmt.FieldSeq+`":`...)
	b = strconv.AppendUint(b, ts.seq, 10)
	b = append(b, `,"`+telfmt.FieldSentAtMS+`":`...)
	b = strconv.AppendInt(b, int64(now*1000), 10)
	b = append(b, `,"`+telfmt.FieldIntervalMS+`":`...)
	b = strconv.AppendInt(b, int64(t.IntervalMS), 10)
	b = append(b, `,"`+telfmt.FieldConfigHash+`":"`...)
	b = append(b, p.cfg.hash...)
	b = append(b, `","`+telfmt.FieldRules+`":[`...)
	for i, r := range p.cfg.rules {
		if i > 0 {
			b = append(b, ',')
		}
		c := r.tc
		b = append(b, `{"`+telfmt.RuleFieldRule+`":`...)
		b = appendJSONString(b, c.name)
		b = append(b, `,"`+telfmt.RuleFieldAllowed+`":`...)
		b = strconv.AppendUint(b, c.allowed, 10)
		b = append(b, `,"`+telfmt.RuleFieldRejected+`":`...)
		b = strconv.AppendUint(b, c.rejected, 10)
		b = append(b, `,"`+telfmt.RuleFieldShadowRejected+`":`...)
		b = strconv.AppendUint(b, c.shadowRejected, 10)
		b = append(b, `,"`+telfmt.RuleFieldFailOpen+`":`...)
		b = strconv.AppendUint(b, c.failOpen, 10)
		b = append(b, `,"`+telfmt.RuleFieldOverflowed+`":`...)
		b = strconv.AppendUint(b, c.overflowed, 10)
		b = append(b, `,"`+telfmt.RuleFieldOverflowIdentities+`":`...)
		b = strconv.AppendUint(b, c.overflowIdentities, 10)
		c.overflowIdentities = 0 // a maximum per report
		b = appendActionCounts(b, c)
		b = append(b, '}')
	}
	b = append(b, `],"`+telfmt.FieldBuckets+`":[`...)
	top := ts.sorted[:0]
	for i := range ts.hot.entries {
		// A request held across a configuration update (delayed, or
		// waiting for a lease) is decided under the old rules; if this
		// configuration has no rule of that name, its bucket is left out:
		// the report lists this configuration's rules, and the admin
		// refuses a report with a bucket of a rule it does not list.
		if e := &ts.hot.entries[i]; p.cfg.byName[e.key.t.name] != nil {
			top = append(top, e)
		}
	}
	slices.SortFunc(top, func(x, y *hotEntry) int {
		switch {
		case x.rejects != y.rejects:
			if x.rejects > y.rejects {
				return -1
			}
			return 1
		case x.tokens < y.tokens:
			return -1
		case x.tokens > y.tokens:
			return 1
		}
		return strings.Compare(x.key.id, y.key.id)
	})
	if len(top) > t.TopN {
		top = top[:t.TopN]
	}
	for i, e := range top {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"`+telfmt.BucketFieldRule+`":`...)
		b = appendJSONString(b, e.key.t.name)
		b = append(b, `,"`+telfmt.BucketFieldIdentity+`":`...)
		b = appendJSONString(b, displayIdentity(e.rule, e.key.id))
		b = append(b, `,"`+telfmt.BucketFieldTokens+`":`...)
		// A bucket in debt (delayed admission's reservations) shows 0: the
		// report carries tokens available, within [0, burst] (contract D).
		b = appendJSONFloat(b, max(e.tokens, 0))
		b = append(b, `,"`+telfmt.BucketFieldBurst+`":`...)
		b = appendJSONFloat(b, e.burst)
		b = append(b, `,"`+telfmt.BucketFieldLastRefill+`":`...)
		b = appendJSONFloat(b, e.lastRefill)
		b = append(b, `,"`+telfmt.BucketFieldRejects+`":`...)
		b = strconv.AppendUint(b, e.rejects, 10)
		if e.rule != nil && e.rule.win != nil {
			// Only windows say their algorithm: token-bucket entries stay
			// as contract D specifies them.
			b = append(b, `,"`+telfmt.BucketFieldAlgorithm+`":`...)
			b = appendJSONString(b, e.rule.algorithm)
		}
		b = append(b, '}')
	}
	clear(top)
	ts.sorted = top[:0]
	b = append(b, `],"`+telfmt.FieldReportsDropped+`":`...)
	b = strconv.AppendUint(b, ts.dropped, 10)
	if p.cfg.hasGlobalRules() {
		b = p.appendFleetReport(b) // fleet_sync.go
	}
	b = append(b, '}')
	ts.body = b
	return b
}

// displayIdentity renders a bucket's identity for operators
// (request.DisplayIdentity: sensitive components masked unless the rule
// says "telemetry_identity": "clear").
func displayIdentity(r *compiledRule, id string) string {
	if r == nil {
		return request.MaskValue(id)
	}
	return request.DisplayIdentity(r.srcKeys, r.clearIdentity, id)
}

// configHash is the contract's config_hash: FNV-1a 64 of the plugin
// configuration bytes, 16 hex digits.
func configHash(data []byte) string {
	s := strconv.FormatUint(state.FNV1a64(bytesView(data)), 16)
	return strings.Repeat("0", 16-len(s)) + s
}

// appendJSONFloat appends a finite number (non-finite ones as 0).
func appendJSONFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
