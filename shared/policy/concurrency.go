package policy

import "strconv"

// AlgorithmConcurrency limits the requests of one identity in flight at
// once (nginx's limit_conn, per request): a request holds one of "limit"
// places from its admission until its stream ends. It is parsed into a
// Window (Limit; WindowSeconds and PeriodSeconds hold max_request_seconds)
// because the filter keeps its state as a window of two periods of that
// length: a place taken in one period is given back when the stream ends,
// or leaves the state when its period is two periods old, so places a
// crashed VM never gave back return within twice max_request_seconds.
const AlgorithmConcurrency = "concurrency"

// Concurrency bounds.
const (
	// MaxConcurrency is the largest limit of requests in flight.
	MaxConcurrency = 1_000_000
	// DefaultMaxRequestSeconds is max_request_seconds when not set: Envoy's
	// default stream idle timeout.
	DefaultMaxRequestSeconds = 300
	// MaxRequestSeconds bounds max_request_seconds: a day.
	MaxRequestSeconds = 86400
)

var (
	concurrencyFields         = []string{"limit", "max_request_seconds"}
	concurrencyOverrideFields = []string{"limit"}
)

const concurrencyExample = `{"limit": <requests in flight at once>}`

// concurrency parses the algorithm_config of a concurrency rule.
func (p *parser) concurrency(path string, v *jvalue) *Window {
	if v.kind != jObject {
		p.errorf(path, "must be an object such as ", concurrencyExample, ", got ", v.kind.String())
		return nil
	}
	before := len(p.errs)
	f := p.object(path, v, concurrencyFields)
	w := &Window{FixedCost: 1, DefaultCost: 1, WindowSeconds: DefaultMaxRequestSeconds, PeriodSeconds: DefaultMaxRequestSeconds}
	lpath := join(path, "limit")
	if lv := f["limit"]; lv == nil {
		p.errorf(lpath, "missing; set the most requests of one identity in flight at once, e.g. 10")
	} else if n, ok := p.integer(lpath, lv, 1, MaxConcurrency,
		"a whole number of requests from 1 to "+strconv.Itoa(MaxConcurrency)+": the most in flight at once"); ok {
		w.Limit = float64(n)
	}
	if mv := f["max_request_seconds"]; mv != nil {
		if n, ok := p.integer(join(path, "max_request_seconds"), mv, 1, MaxRequestSeconds,
			"whole seconds from 1 to "+strconv.Itoa(MaxRequestSeconds)+", at least your longest request (a stream that lasts longer may stop counting)"); ok {
			w.WindowSeconds, w.PeriodSeconds = n, n
		}
	}
	if len(p.errs) != before {
		return nil
	}
	return w
}

// normConcurrency is a concurrency rule's normalized algorithm_config.
type normConcurrency struct {
	Limit             float64 `json:"limit"`
	MaxRequestSeconds int     `json:"max_request_seconds"`
}

// validConcurrencyLimit reports whether an override's limit is one the
// parser accepts for a concurrency rule (the overrides' fast path).
func validConcurrencyLimit(x float64) bool {
	return x >= 1 && x <= MaxConcurrency && x == float64(int64(x))
}
