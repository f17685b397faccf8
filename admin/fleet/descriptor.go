package fleet

import (
	"fmt"
	"math"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// The descriptor entries of the protocol (docs/fleet.md).
const (
	KeyRule     = "sluice_rule"   // the rule's name in the policy
	KeyID       = "sluice_id"     // the identity (opaque, chosen by the plugin)
	KeyOp       = "sluice_op"     // optional; "return" gives tokens back, "charge" takes them into debt, "block" blocks a refused identity
	KeyWindow   = "sluice_window" // optional, with sluice_op=return: the start (unix ms) of the window (a rolling window's sub-period) a return belongs to
	OpReturn    = "return"
	OpCharge    = "charge"              // a cost the response reported: taken unconditionally, into the bucket's debt
	OpBlock     = "block"               // a request's cost, sent before its ask by a rule with block_seconds: a bucket that cannot pay it is put that long below empty
	NodeHeader  = "x-sluice-node"       // request metadata: the caller's node id
	FleetHeader = "x-sluice-fleet-size" // response metadata: distinct nodes seen in the last 30 s
)

// Input bounds: beyond them a request is refused with INVALID_ARGUMENT
// rather than costing Redis memory or time.
const (
	MaxDescriptors = 256
	MaxDomainLen   = 256
	MaxRuleLen     = 64 // as the policy's rule names
	MaxIDLen       = 256
	MaxNodeLen     = 256
)

// item is one descriptor, understood.
type item struct {
	rule, id string
	sluice   bool   // has sluice_rule: the protocol's shape
	ret      bool   // give tokens back (sluice_op=return, or is_negative_hits)
	charge   bool   // take tokens unconditionally, into debt (sluice_op=charge)
	block    bool   // block the identity if its bucket cannot pay hits tokens (sluice_op=block)
	opEntry  int    // the index of the sluice_op entry, for errors found later
	hits     uint64 // tokens asked for, returned or charged; a block's request cost (at least 1)
	override *override
	// window is sluice_window: the start (unix ms) of the window whose
	// leased requests a return gives back (hasWindow).
	window    int64
	hasWindow bool
}

// override is a descriptor's own limit (RateLimitOverride).
type override struct {
	perUnit  uint32
	unit     typev3.RateLimitUnit
	seconds  float64 // length of the unit times its multiplier
	multiple uint32
}

// limit returns the override as a bucket: perUnit tokens per unit of
// time, with a burst of perUnit (one unit's worth, the most a fixed window
// of that unit would admit at once). ok is false for perUnit 0: nothing
// is ever granted.
func (o *override) limit() (redisgcra.Limit, bool) {
	if o.perUnit == 0 {
		return redisgcra.Limit{}, false
	}
	return redisgcra.Limit{Rate: float64(o.perUnit) / o.seconds, Burst: float64(o.perUnit)}, true
}

var unitSeconds = map[typev3.RateLimitUnit]float64{
	typev3.RateLimitUnit_SECOND: 1,
	typev3.RateLimitUnit_MINUTE: 60,
	typev3.RateLimitUnit_HOUR:   3600,
	typev3.RateLimitUnit_DAY:    86400,
	typev3.RateLimitUnit_MONTH:  30 * 86400, // as envoyproxy/ratelimit
	typev3.RateLimitUnit_YEAR:   365 * 86400,
}

// parseDescriptor reads descriptors[i]. reqHits is the request's
// hits_addend, used when the descriptor has none (0 means 1, as the API
// says). Errors name the field.
func parseDescriptor(i int, d *ratelimitv3.RateLimitDescriptor, reqHits uint32) (item, error) {
	path := "descriptors[" + strconv.Itoa(i) + "]"
	var it item
	if d == nil {
		return it, fmt.Errorf("%s: missing", path)
	}
	if len(d.Entries) == 0 {
		return it, fmt.Errorf("%s.entries: empty", path)
	}
	var hasID, hasOp bool
	for j, e := range d.Entries {
		epath := fmt.Sprintf("%s.entries[%d]", path, j)
		if e == nil {
			return it, fmt.Errorf("%s: missing", epath)
		}
		var err error
		switch e.Key {
		case KeyRule:
			err = setOnce(&it.rule, &it.sluice, e.Value, MaxRuleLen)
		case KeyID:
			err = setOnce(&it.id, &hasID, e.Value, MaxIDLen)
		case KeyOp:
			err = parseOp(&it, e.Value, hasOp)
			hasOp, it.opEntry = true, j
		case KeyWindow:
			err = parseWindowEntry(&it, e.Value)
		}
		if err != nil {
			return it, fmt.Errorf("%s: %w", epath, err)
		}
	}
	if it.sluice || hasID || hasOp || it.hasWindow {
		if err := checkSluiceShape(d); err != nil {
			return it, fmt.Errorf("%s.entries: %w", path, err)
		}
	}
	if it.hasWindow && !it.ret {
		return it, fmt.Errorf("%s.entries: %s without %s=%s (only a return names its window)", path, KeyWindow, KeyOp, OpReturn)
	}
	if it.charge && d.IsNegativeHits {
		return it, fmt.Errorf("%s.is_negative_hits: true with %s=%s (a charge takes tokens; a return gives them back)", path, KeyOp, OpCharge)
	}
	if it.block && d.IsNegativeHits {
		return it, fmt.Errorf("%s.is_negative_hits: true with %s=%s (a block names a request's cost; a return gives tokens back)", path, KeyOp, OpBlock)
	}
	it.ret = it.ret || d.IsNegativeHits
	it.hits = uint64(reqHits)
	if it.hits == 0 {
		it.hits = 1
	}
	if d.HitsAddend != nil {
		it.hits = d.HitsAddend.Value
	}
	if it.block && it.hits == 0 {
		it.hits = 1 // a request costs at least one token
	}
	if d.Limit != nil {
		o, err := parseOverride(d.Limit)
		if err != nil {
			return it, fmt.Errorf("%s.limit.%w", path, err)
		}
		it.override = o
	}
	return it, nil
}

// parseOp reads a sluice_op entry's value into it.
func parseOp(it *item, v string, seen bool) error {
	switch {
	case seen:
		return fmt.Errorf("%s appears twice", KeyOp)
	case v == OpReturn:
		it.ret = true
	case v == OpCharge:
		it.charge = true
	case v == OpBlock:
		it.block = true
	default:
		return fmt.Errorf("%s %q: want %q, %q or %q", KeyOp, clip(v), OpReturn, OpCharge, OpBlock)
	}
	return nil
}

// maxWindowStart bounds sluice_window (unix ms): the year 9999.
const maxWindowStart = 253402300799999

func parseWindowEntry(it *item, v string) error {
	if it.hasWindow {
		return fmt.Errorf("%s appears twice", KeyWindow)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxWindowStart {
		return fmt.Errorf("%s %q: want the window's start in unix milliseconds, 0 to %d", KeyWindow, clip(v), int64(maxWindowStart))
	}
	it.window, it.hasWindow = n, true
	return nil
}

func setOnce(dst *string, seen *bool, v string, maxLen int) error {
	switch {
	case *seen:
		return fmt.Errorf("appears twice")
	case v == "":
		return fmt.Errorf("empty value")
	case len(v) > maxLen:
		return fmt.Errorf("value of %d bytes, over the limit of %d", len(v), maxLen)
	}
	*dst, *seen = v, true
	return nil
}

// checkSluiceShape: a descriptor with any sluice_ entry must be exactly
// the protocol's: sluice_rule and sluice_id, optionally sluice_op, nothing
// else (a misspelled key must not silently become an unlimited bucket).
func checkSluiceShape(d *ratelimitv3.RateLimitDescriptor) error {
	for _, e := range d.Entries {
		switch e.Key {
		case KeyRule, KeyID, KeyOp, KeyWindow:
		default:
			return fmt.Errorf("unknown key %q in a sluice descriptor (want %s, %s and optionally %s and %s)", clip(e.Key), KeyRule, KeyID, KeyOp, KeyWindow)
		}
	}
	for _, k := range []string{KeyRule, KeyID} {
		if !hasKey(d, k) {
			return fmt.Errorf("%s missing", k)
		}
	}
	return nil
}

func hasKey(d *ratelimitv3.RateLimitDescriptor, k string) bool {
	for _, e := range d.Entries {
		if e.Key == k {
			return true
		}
	}
	return false
}

func parseOverride(l *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*override, error) {
	sec, ok := unitSeconds[l.Unit]
	if !ok {
		return nil, fmt.Errorf("unit: %v; use SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", l.Unit)
	}
	o := &override{perUnit: l.RequestsPerUnit, unit: l.Unit, seconds: sec, multiple: 1}
	if l.UnitMultiplier != nil {
		if l.UnitMultiplier.Value == 0 {
			return nil, fmt.Errorf("unit_multiplier: 0; at least 1")
		}
		o.multiple = l.UnitMultiplier.Value
		o.seconds = sec * float64(o.multiple)
	}
	if math.IsInf(o.seconds, 0) || o.seconds <= 0 {
		return nil, fmt.Errorf("unit_multiplier: out of range")
	}
	return o, nil
}

// clip shortens a client's string for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func wrapU32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }
