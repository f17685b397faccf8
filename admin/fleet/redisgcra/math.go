// Package redisgcra is the fleet-wide bucket of Sluice's global rules: a
// GCRA (generic cell rate algorithm, the token bucket expressed as one
// timestamp) run as a Lua script in Redis, so that every admin replica and
// every Envoy behind them share one exact limit.
//
// The model is the token bucket of shared/limiter: a bucket of burst b
// tokens refilled at r tokens per second. GCRA stores only the bucket's
// theoretical arrival time (TAT): the moment it is full again. With
// T = 1/r the time one token takes to refill and tau = b*T the burst as
// time, taking n tokens at time now is
//
//	tat' = max(tat, now) + n*T      granted iff tat' - now <= tau
//
// and the tokens still available are (tau - (tat - now)) / T. A charge
// takes its n tokens unconditionally, into debt: tat' = max(tat, now) + n*T,
// at most now + tau + D*T for a debt of at most D tokens (Limit.MaxDebt).
// A block of S seconds (Limit.BlockSeconds), for a request costing n
// tokens, puts a bucket that could not pay them S seconds of refill below
// empty: tat' = now + tau + S (unless already below empty).
// Time is Redis'
// own clock (TIME, microseconds), so the admin replicas' clocks do not
// matter. Every quantity is a whole number of microseconds; the conversions
// here round against the caller (costs up, credits and tau down), which is
// what makes "admitted <= burst + rate*t" hold exactly: rounding costs at
// most one microsecond of refill per call.
package redisgcra

import (
	"math"
	"time"
)

// MaxMicros bounds every duration passed to the script (2^52 us, about 142
// years): with Redis TIME near 2^51 us, TAT + amount stays below 2^53, where
// Lua's doubles are still exact integers.
const MaxMicros = 1 << 52

const microsPerSecond = 1e6

// Limit is a bucket's configuration: Rate tokens per second, Burst tokens.
// Both must be > 0 (and finite); Burst >= Rate is not required here.
type Limit struct {
	Rate  float64
	Burst float64
	// MaxDebt is how far below empty a charge may take the bucket, in
	// tokens: a global token bucket's max_debt when its costs are read
	// from the response, else 0 (a charge empties the bucket at most).
	MaxDebt float64
	// BlockSeconds is how long a refused identity is kept out: a global
	// token bucket's block_seconds (its override's, for an identity with
	// one), for the block op (Op.Block); 0: never blocked.
	BlockSeconds int
}

// Valid reports whether l can be run: a positive, finite rate and burst.
func (l Limit) Valid() bool {
	return l.Rate > 0 && l.Burst > 0 && !math.IsInf(l.Rate, 0) && !math.IsInf(l.Burst, 0)
}

// Tau is the burst as time: floor(Burst/Rate) microseconds, clamped to
// MaxMicros.
func (l Limit) Tau() int64 {
	return clamp(math.Floor(l.Burst * microsPerSecond / l.Rate))
}

// Cost is the time n tokens take to refill: ceil(n/Rate) microseconds,
// clamped to MaxMicros (a cost above Tau is refused anyway).
func (l Limit) Cost(n uint64) int64 { return l.ceilTime(float64(n)) }

// ceilTime is the time tokens take to refill, rounded up: ceil(tokens/Rate)
// microseconds, clamped to MaxMicros.
func (l Limit) ceilTime(tokens float64) int64 {
	exact := tokens * microsPerSecond / l.Rate
	c := math.Ceil(exact)
	// Division rounds to nearest: a true quotient a hair above an integer
	// may come out as that integer. Never charge less than the tokens' worth.
	if c < MaxMicros && c*l.Rate < tokens*microsPerSecond {
		c++
	}
	return clamp(c)
}

// Debt is MaxDebt as time: ceil(MaxDebt/Rate) microseconds, clamped to
// MaxMicros; 0 without a debt. Rounded up, against the caller, as a cost:
// the debt a charge may leave is never less than MaxDebt tokens.
func (l Limit) Debt() int64 {
	if !(l.MaxDebt > 0) { // NaN too
		return 0
	}
	return l.ceilTime(l.MaxDebt)
}

// ChargeCap is the most backlog (TAT - now) a charge may leave: the burst
// plus the debt, Tau() + Debt(), clamped to MaxMicros so that the scripts'
// integers stay exact.
func (l Limit) ChargeCap() int64 { return min(l.Tau()+l.Debt(), MaxMicros) }

// Block is BlockSeconds as time: BlockSeconds * 10^6 microseconds,
// clamped to MaxMicros; 0 without a block.
func (l Limit) Block() int64 {
	if l.BlockSeconds <= 0 {
		return 0
	}
	return clamp(float64(l.BlockSeconds) * microsPerSecond)
}

// Credit is the time n returned tokens give back: floor(n/Rate)
// microseconds, clamped to MaxMicros.
func (l Limit) Credit(n uint64) int64 {
	return clamp(math.Floor(float64(n) * microsPerSecond / l.Rate))
}

// Remaining is the whole tokens still available when the bucket's backlog
// (TAT - now) is backlog microseconds: floor((tau - backlog) * Rate).
func (l Limit) Remaining(backlog int64) uint64 {
	head := l.Tau() - backlog
	if head <= 0 {
		return 0
	}
	return uint64(math.Floor(float64(head) * l.Rate / microsPerSecond))
}

// Micros converts a script's microseconds to a Duration.
func Micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func clamp(us float64) int64 {
	switch {
	case us >= MaxMicros || math.IsNaN(us):
		return MaxMicros
	case us < 0:
		return 0
	}
	return int64(us)
}
