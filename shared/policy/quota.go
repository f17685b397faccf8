package policy

import (
	"strings"
	"time"
	// The IANA time zone database, embedded: the wasm module has no
	// zoneinfo files to read, and the admin must accept exactly the zones
	// the filter accepts. It adds about 376 kB to each binary
	// (docs/design/quota.md).
	_ "time/tzdata"
)

// AlgorithmQuota is the calendar quota: at most Limit per hour, day, ISO
// week or month of a time zone.
const AlgorithmQuota = "quota"

// Calendar periods of a quota.
const (
	PeriodHour  = "hour"
	PeriodDay   = "day"
	PeriodWeek  = "week" // starts Monday 00:00 (ISO 8601)
	PeriodMonth = "month"
	PeriodYear  = "year"
)

var quotaPeriods = []string{PeriodHour, PeriodDay, PeriodWeek, PeriodMonth, PeriodYear}

// Quota is the algorithm_config of "quota": at most Limit (summed cost)
// per calendar Period of TimeZone, reset at the start of each period in
// that zone.
type Quota struct {
	Limit    float64        // "limit", > 0, <= MaxBurst
	Period   string         // "period": one of PeriodHour, PeriodDay, PeriodWeek, PeriodMonth, PeriodYear
	TimeZone string         // "time_zone": an IANA name, default "UTC"
	Location *time.Location // TimeZone loaded from the embedded database
	Cost     CostSource
	// FixedCost and DefaultCost as for the other algorithms (default 1).
	FixedCost   float64
	DefaultCost float64
	// MaxDebt is "max_debt" with a response cost source: how far a
	// period's use may exceed Limit when responses report more than was
	// left (default Limit). 0 otherwise.
	MaxDebt float64
}

var quotaFields = []string{"limit", "period", "time_zone", "cost_source", "fixed_cost", "default_cost", "max_debt"}

const quotaExample = `{"limit": <requests (or cost) per period>, "period": "hour", "day", "week", "month" or "year", "time_zone": "<IANA name, default UTC>"}`

// quota parses the algorithm_config of "quota".
func (p *parser) quota(path string, v *jvalue) *Quota {
	if v.kind != jObject {
		p.errorf(path, "must be an object such as ", quotaExample, ", got ", v.kind.String())
		return nil
	}
	before := len(p.errs)
	f := p.object(path, v, quotaFields)
	q := &Quota{FixedCost: 1, DefaultCost: 1, TimeZone: "UTC", Location: time.UTC}

	var limitOK bool
	q.Limit, limitOK = p.limit(path, f, "period")

	ppath := join(path, "period")
	switch pv := f["period"]; {
	case pv == nil:
		p.errorf(ppath, "missing; set the calendar period: ", quoteList(quotaPeriods))
	case pv.kind != jString:
		p.errorf(ppath, "must be a string, one of ", quoteList(quotaPeriods), "; got ", pv.kind.String())
	case !isQuotaPeriod(pv.s):
		p.errorf(ppath, quoteShort(pv.s), " is not a period; use one of ", quoteList(quotaPeriods))
	default:
		q.Period = pv.s
	}

	if zv := f["time_zone"]; zv != nil {
		zpath := join(path, "time_zone")
		if zv.kind != jString {
			p.errorf(zpath, `must be a string naming an IANA time zone such as "Europe/Berlin"; got `, zv.kind.String())
		} else if loc, msg := loadZone(zv.s); msg != "" {
			p.errorf(zpath, msg)
		} else {
			q.TimeZone, q.Location = zv.s, loc
		}
	}

	p.costSource(path, f, &q.Cost, true)
	p.costFields(path, f, &q.FixedCost, &q.DefaultCost, costCap{
		ok: limitOK, max: q.Limit, name: "limit", holds: "a period admits"})
	q.MaxDebt = p.maxDebt(path, f, q.Cost, limitOK, q.Limit, "limit")
	if len(p.errs) != before {
		return nil
	}
	return q
}

func isQuotaPeriod(s string) bool {
	for _, x := range quotaPeriods {
		if s == x {
			return true
		}
	}
	return false
}

// loadZone loads an IANA zone from the embedded database. "Local" and ""
// are refused: they would depend on the machine.
func loadZone(name string) (*time.Location, string) {
	if name == "" || name == "Local" || len(name) > 64 {
		return nil, quoteShort(name) + ` is not an IANA time zone name; use one such as "Europe/Berlin", "America/New_York" or "UTC"`
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		hint := ""
		if !strings.Contains(name, "/") && name != "UTC" {
			hint = ` (names are Area/City, e.g. "Europe/Berlin"; abbreviations such as "CET" or "PST" are not zones)`
		}
		return nil, quoteShort(name) + " is not a known IANA time zone" + hint
	}
	return loc, ""
}

// costSource reads "cost_source" into cs. Response sources
// (response_header:, response_trailer:, response_status:,
// response_grpc_status:) are accepted only when response is
// true (token_bucket and quota).
func (p *parser) costSource(path string, f map[string]*jvalue, cs *CostSource, response bool) {
	cv := f["cost_source"]
	if cv == nil {
		return
	}
	cpath := join(path, "cost_source")
	want := `"fixed", "header:<name>", "query:<name>", "metadata:<namespace>:<key>", "response_header:<name>", "response_trailer:<name>", "response_status:<statuses>", "response_grpc_status:<codes>", "response_json:<path>" or "response_bytes"`
	if !response {
		want = `"fixed", "header:<name>", "query:<name>" or "metadata:<namespace>:<key>"`
	}
	if cv.kind != jString {
		p.errorf(cpath, "must be a string: ", want, "; got ", cv.kind.String())
		return
	}
	c, msg := parseCostSource(cv.s)
	switch {
	case msg != "":
		p.errorf(cpath, msg)
	case c.FromResponse() && !response:
		p.errorf(cpath, quoteShort(cv.s), " is a response cost source, supported by token_bucket and quota only; use ", want)
	default:
		*cs = c
	}
}

// maxDebt reads "max_debt": with a response cost source, a number from 0
// to MaxBurst, default capacity (the burst or limit); refused otherwise.
func (p *parser) maxDebt(path string, f map[string]*jvalue, cs CostSource, capOK bool, capacity float64, capName string) float64 {
	dv := f["max_debt"]
	dpath := join(path, "max_debt")
	if !cs.FromResponse() {
		if dv != nil {
			p.errorf(dpath, `applies only to a cost read from the response; set cost_source to one of the response sources ("response_header:<name>", "response_trailer:<name>", "response_status:<statuses>", "response_grpc_status:<codes>", "response_json:<path>", "response_bytes"), or remove max_debt`)
		}
		return 0
	}
	if dv == nil {
		if capOK {
			return capacity
		}
		return 0
	}
	x, text, ok := p.number(dpath, dv)
	switch {
	case !ok:
	case x < 0:
		p.errorf(dpath, text, " is negative; max_debt is how far below empty a response's cost may take the ", capName, ", >= 0 (default ", capName, ")")
	case x > MaxBurst:
		p.errorf(dpath, text, " is too large; max_debt must be <= 1e12")
	default:
		return x
	}
	return 0
}
