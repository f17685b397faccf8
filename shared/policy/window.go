package policy

import "strconv"

// Window is the algorithm_config of the windowed algorithms:
//
//   - fixed_window: at most Limit per aligned window of WindowSeconds (a
//     counter per interval [k*W, (k+1)*W) of Unix time).
//   - sliding_window: the weighted two-window estimate of the use in the last
//     WindowSeconds must stay <= Limit.
//   - rolling_window (the Nominet rolling window): at most Limit in any rolling WindowSeconds,
//     accounted in PeriodSeconds sub-periods, and, with MaxPerPeriod, at most
//     that much per sub-period.
//
// Limit counts cost: a request costing 3 uses 3 of it, as with token_bucket.
type Window struct {
	Limit         float64 // "limit", > 0, <= MaxBurst
	WindowSeconds int     // "window_seconds", 1..MaxWindowSeconds
	// PeriodSeconds is rolling_window's "period_seconds": it divides
	// WindowSeconds into at most MaxPeriods sub-periods. For fixed_window
	// and sliding_window Parse sets it to WindowSeconds.
	PeriodSeconds int
	// MaxPerPeriod is rolling_window's "max_per_period", <= Limit; 0 means
	// no cap per sub-period (always 0 for the other two).
	MaxPerPeriod float64
	Cost         CostSource
	FixedCost    float64 // default 1
	DefaultCost  float64 // default 1
}

// Periods returns the number of sub-periods per window (1 for
// fixed_window and sliding_window).
func (w *Window) Periods() int {
	if w == nil || w.PeriodSeconds <= 0 || w.WindowSeconds < w.PeriodSeconds {
		return 1
	}
	return w.WindowSeconds / w.PeriodSeconds
}

// Window bounds.
const (
	// MaxWindowSeconds is the longest window: 366 days.
	MaxWindowSeconds = 366 * 24 * 3600
	// MaxPeriods bounds a rolling window's sub-periods, so its state (one
	// count per sub-period) stays small: at most 60 numbers, a few hundred
	// bytes per identity. 24 hourly periods (the Nominet rolling window) or 60 per-minute
	// periods of an hour fit.
	MaxPeriods = 60
)

var (
	windowFields        = []string{"limit", "window_seconds", "cost_source", "fixed_cost", "default_cost"}
	rollingWindowFields = []string{"limit", "window_seconds", "period_seconds", "max_per_period", "cost_source", "fixed_cost", "default_cost"}
)

// isWindowAlgorithm reports whether the algorithm's state is a window:
// the windows, and concurrency (concurrency.go).
func isWindowAlgorithm(name string) bool {
	return name == AlgorithmFixedWindow || name == AlgorithmSlidingWindow || name == AlgorithmRollingWindow || name == AlgorithmConcurrency
}

// windowExample is the smallest valid algorithm_config, for messages.
func windowExample(alg string) string {
	if alg == AlgorithmConcurrency {
		return concurrencyExample
	}
	if alg == AlgorithmRollingWindow {
		return `{"limit": <requests per window>, "window_seconds": <seconds>, "period_seconds": <seconds dividing the window>}`
	}
	return `{"limit": <requests per window>, "window_seconds": <seconds>}`
}

// window parses the algorithm_config of a windowed algorithm.
func (p *parser) window(path string, v *jvalue, alg string) *Window {
	if alg == AlgorithmConcurrency {
		return p.concurrency(path, v)
	}
	if v.kind != jObject {
		p.errorf(path, "must be an object such as ", windowExample(alg), ", got ", v.kind.String())
		return nil
	}
	before := len(p.errs)
	fields := windowFields
	if alg == AlgorithmRollingWindow {
		fields = rollingWindowFields
	}
	f := p.object(path, v, fields)
	w := &Window{FixedCost: 1, DefaultCost: 1}

	var limitOK bool
	w.Limit, limitOK = p.limit(path, f, "window")

	wpath := join(path, "window_seconds")
	windowOK := false
	if wv := f["window_seconds"]; wv == nil {
		p.errorf(wpath, "missing; set the window length in whole seconds, e.g. 60")
	} else if n, ok := p.integer(wpath, wv, 1, MaxWindowSeconds,
		"an integer number of seconds from 1 to "+strconv.Itoa(MaxWindowSeconds)+" (366 days)"); ok {
		w.WindowSeconds, w.PeriodSeconds, windowOK = n, n, true
	}

	capacity := w.Limit // what one request may cost at most
	if alg == AlgorithmRollingWindow {
		p.rollingPeriod(path, f, w, windowOK)
		mpath := join(path, "max_per_period")
		if mv := f["max_per_period"]; mv != nil {
			if x, text, ok := p.number(mpath, mv); ok {
				switch {
				case x <= 0:
					p.errorf(mpath, text, " is not positive; max_per_period caps the use per period and must be > 0 (leave it out for no cap)")
				case limitOK && x > w.Limit:
					p.errorf(mpath, text, " exceeds limit ", fmtNum(w.Limit),
						"; the per-period cap must be <= limit (leave it out for no cap)")
				default:
					w.MaxPerPeriod = x
					capacity = x
				}
			}
		}
	}
	p.windowCosts(path, f, w, limitOK, capacity)
	if len(p.errs) != before {
		return nil
	}
	return w
}

// limit reads the "limit" of a window or quota (per names the unit: "window",
// "period"): a number > 0 and <= MaxBurst.
func (p *parser) limit(path string, f map[string]*jvalue, per string) (float64, bool) {
	lpath := join(path, "limit")
	lv := f["limit"]
	if lv == nil {
		p.errorf(lpath, "missing; set the most requests (or cost) admitted per ", per, ", a number > 0")
		return 0, false
	}
	x, text, ok := p.number(lpath, lv)
	switch {
	case !ok:
	case x <= 0:
		p.errorf(lpath, text, " is not positive; limit is the most requests (or cost) per ", per, " and must be > 0")
	case x > MaxBurst:
		p.errorf(lpath, text, " is too large; limit must be <= 1e12")
	default:
		return x, true
	}
	return 0, false
}

// rollingPeriod reads rolling_window's period_seconds: it must divide
// window_seconds into at most MaxPeriods sub-periods.
func (p *parser) rollingPeriod(path string, f map[string]*jvalue, w *Window, windowOK bool) {
	ppath := join(path, "period_seconds")
	pv := f["period_seconds"]
	if pv == nil {
		p.errorf(ppath, "missing; set how often the allowance is recalculated, in whole seconds dividing window_seconds (e.g. 3600 for hourly)")
		return
	}
	n, ok := p.integer(ppath, pv, 1, MaxWindowSeconds,
		"an integer number of seconds from 1 to window_seconds that divides window_seconds")
	if !ok || !windowOK {
		return
	}
	win := w.WindowSeconds
	switch {
	case n > win:
		p.errorf(ppath, strconv.Itoa(n), " exceeds window_seconds ", strconv.Itoa(win), "; a period is a part of the window")
	case win%n != 0:
		p.errorf(ppath, strconv.Itoa(n), " does not divide window_seconds ", strconv.Itoa(win),
			"; the window must be a whole number of periods")
	case win/n > MaxPeriods:
		p.errorf(ppath, strconv.Itoa(n), " makes ", strconv.Itoa(win/n), " periods per window; at most ",
			strconv.Itoa(MaxPeriods), " are allowed (the state keeps one count per period), so use a period of at least ",
			strconv.Itoa((win+MaxPeriods-1)/MaxPeriods), " seconds that divides the window")
	default:
		w.PeriodSeconds = n
	}
}

// windowCosts reads cost_source, fixed_cost and default_cost like
// token_bucket does; a cost may not exceed what one window (or period)
// admits.
func (p *parser) windowCosts(path string, f map[string]*jvalue, w *Window, limitOK bool, capacity float64) {
	p.costSource(path, f, &w.Cost, false) // quota.go
	capName := "limit"
	if w.MaxPerPeriod > 0 {
		capName = "max_per_period"
	}
	p.costFields(path, f, &w.FixedCost, &w.DefaultCost, costCap{
		ok: limitOK, max: capacity, name: capName, holds: "a window admits"})
}

// costCap is what a cost is checked against: the most one request can ever
// get (a bucket's burst, a window's limit or per-period cap).
type costCap struct {
	ok    bool    // max is valid (else only the fixed bounds are checked)
	max   float64 // the most a request may cost
	name  string  // the field max comes from, for the message
	unit  string  // " tokens" or ""
	holds string  // completes "a request costing more than ..."
}

// costFields parses fixed_cost and default_cost into fixed and def: each,
// when present, a number > 0, <= MaxCost and <= the cap.
func (p *parser) costFields(path string, f map[string]*jvalue, fixed, def *float64, c costCap) {
	for _, fld := range []struct {
		name string
		dst  *float64
	}{{"fixed_cost", fixed}, {"default_cost", def}} {
		cv := f[fld.name]
		if cv == nil {
			continue
		}
		cpath := join(path, fld.name)
		x, text, ok := p.number(cpath, cv)
		if !ok {
			continue
		}
		switch {
		case x <= 0:
			p.errorf(cpath, text, " is not positive; a cost must be > 0", c.unit)
		case x > MaxCost:
			p.errorf(cpath, text, " is too large; a cost must be <= 1e9", c.unit)
		case c.ok && x > c.max:
			p.errorf(cpath, text, " exceeds ", c.name, " ", fmtNum(c.max), "; a request costing more than ", c.holds,
				" could never be admitted, so lower the cost or raise ", c.name)
		default:
			*fld.dst = x
		}
	}
}

func fmtNum(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// CostConfig returns the rule's cost source, fixed cost and default cost,
// whatever its algorithm.
func (r *Rule) CostConfig() (CostSource, float64, float64) {
	switch {
	case r.TokenBucket != nil:
		return r.TokenBucket.Cost, r.TokenBucket.FixedCost, r.TokenBucket.DefaultCost
	case r.Window != nil:
		return r.Window.Cost, r.Window.FixedCost, r.Window.DefaultCost
	case r.Quota != nil:
		return r.Quota.Cost, r.Quota.FixedCost, r.Quota.DefaultCost
	}
	return CostSource{}, 1, 1
}

// Algorithms returns the algorithm names the parser accepts.
func Algorithms() []string { return append([]string(nil), algorithms...) }

// IsAlgorithm reports whether name is an algorithm the parser accepts.
func IsAlgorithm(name string) bool {
	return name == AlgorithmTokenBucket || isWindowAlgorithm(name) || name == AlgorithmQuota
}
