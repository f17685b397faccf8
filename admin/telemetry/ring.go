package telemetry

import (
	"encoding/json"
	"math"
)

// Decision is what happened to a request, as the plugin counts it.
type Decision int

// The decisions, in the order of Counts.
const (
	Allowed        Decision = iota // let through (a shadow-mode rule over its limit counts as ShadowRejected instead)
	Rejected                       // answered with the reject status
	ShadowRejected                 // over the limit of a shadow-mode rule, let through
	FailOpen                       // let through because the bucket could not be read or written
	NumDecisions
)

var decisionNames = [NumDecisions]string{"allowed", "rejected", "shadow_rejected", "fail_open"}

// String returns the decision's name on the wire and in metrics.
func (d Decision) String() string {
	if d >= 0 && d < NumDecisions {
		return decisionNames[d]
	}
	return "unknown"
}

// Counts are request counts per decision, indexed by Decision.
type Counts [NumDecisions]uint64

// Sum returns the total over every decision, at most 2^64-1.
func (c Counts) Sum() uint64 { return satSum(c[:]...) }

// MarshalJSON writes the counts as an object keyed by decision names.
func (c Counts) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]uint64{
		"allowed": c[Allowed], "rejected": c[Rejected], "shadow_rejected": c[ShadowRejected], "fail_open": c[FailOpen],
	})
}

// add adds d, each count stopping at 2^64-1 rather than wrapping.
func (c *Counts) add(d Counts) {
	for i := range c {
		c[i] = satAdd(c[i], d[i])
	}
}

// Rates are requests per second per decision.
type Rates [NumDecisions]float64

// MarshalJSON writes the rates as an object keyed by decision names.
func (r Rates) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]float64{
		"allowed": r[Allowed], "rejected": r[Rejected], "shadow_rejected": r[ShadowRejected], "fail_open": r[FailOpen],
	})
}

// Sum returns the total rate.
func (r Rates) Sum() float64 { return r[0] + r[1] + r[2] + r[3] }

// ring holds per-second counts for the last len(slots) seconds. A slot
// remembers its second, so a slot last written a lap ago reads as zero and
// nothing needs clearing. Counts saturate at 2^32-1 per second and series.
type ring struct {
	slots []slot
}

type slot struct {
	sec int64
	c   [NumDecisions]uint32
}

func newRing(seconds int) *ring {
	r := &ring{slots: make([]slot, seconds)}
	for i := range r.slots {
		r.slots[i].sec = math.MinInt64
	}
	return r
}

func (r *ring) index(sec int64) int {
	n := int64(len(r.slots))
	return int(((sec % n) + n) % n)
}

// add adds d to second sec.
func (r *ring) add(sec int64, d *Counts) {
	s := &r.slots[r.index(sec)]
	if s.sec != sec {
		if s.sec > sec { // older than the ring holds: dropped
			return
		}
		*s = slot{sec: sec}
	}
	for i, v := range d {
		s.c[i] = uint32(min(satAdd(uint64(s.c[i]), v), math.MaxUint32))
	}
}

// sum returns the counts of seconds from..to (inclusive).
func (r *ring) sum(from, to int64) Counts {
	var c Counts
	if to-from >= int64(len(r.slots)) {
		from = to - int64(len(r.slots)) + 1
	}
	for sec := from; sec <= to; sec++ {
		s := &r.slots[r.index(sec)]
		if s.sec == sec {
			for i, v := range s.c {
				c[i] += uint64(v)
			}
		}
	}
	return c
}
