package telemetry

import "strconv"

// Fleet is a report's optional "fleet" object (plugin fleet mode,
// docs/filter.md "Fleet mode"): sent only when the plugin configuration has
// global rules. Optional and additive: reports without it are unchanged.
type Fleet struct {
	BackendHealthy bool        `json:"backend_healthy"`
	FleetSize      int64       `json:"fleet_size"`
	Rules          []FleetRule `json:"rules"`
}

// FleetRule is one global rule as this VM sees it at its last sync turn.
type FleetRule struct {
	Rule           string  `json:"rule"`
	LeaseTokens    float64 `json:"lease_tokens"`    // tokens leased in this VM's synced pools
	Pools          int64   `json:"pools"`           // those pools
	FallbackActive bool    `json:"fallback_active"` // backend down, or some pool on its local share
}

// MaxFleetSize bounds "fleet_size" (the plugin's own bound).
const MaxFleetSize = 100000

const (
	flHealthy = 1 << iota
	flSize
	flRules
)

var fleetFields = []objField{{FleetFieldBackendHealthy, flHealthy, true}, {FleetFieldSize, flSize, true}, {FleetFieldRules, flRules, true}}

const (
	frRule = 1 << iota
	frLease
	frPools
	frFallback
)

var fleetRuleFields = []objField{{FleetRuleFieldRule, frRule, true}, {FleetRuleFieldLeaseTokens, frLease, true},
	{FleetRuleFieldPools, frPools, true}, {FleetRuleFieldFallbackActive, frFallback, true}}

// fleet parses the "fleet" object; every field is required.
func (p *parser) fleet(l loc) *Fleet {
	f := &Fleet{Rules: []FleetRule{}}
	if c := p.peek(); c != '{' {
		p.errorf(l, "must be an object {backend_healthy, fleet_size, rules}, got ", kindName(c))
		p.skip()
		return f
	}
	seen := p.fields(l, "backend_healthy, fleet_size, rules", fleetFields, func(bit int, fl loc) {
		switch bit {
		case flHealthy:
			f.BackendHealthy, _ = p.boolean(fl)
		case flSize:
			if v, ok := p.int64(fl); ok {
				f.FleetSize = v
				if v < 1 || v > MaxFleetSize {
					p.errorf(fl, strconv.FormatInt(v, 10), " is out of range; use 1 to ", strconv.Itoa(MaxFleetSize))
				}
			}
		case flRules:
			p.array(fl, MaxReportRules, func(i int) {
				f.Rules = append(f.Rules, p.fleetRule(loc{arr: "fleet.rules", idx: i}))
			})
		}
	})
	p.required(l, seen, fleetFields)
	return f
}

func (p *parser) fleetRule(l loc) FleetRule {
	var r FleetRule
	if c := p.peek(); c != '{' {
		p.errorf(l, "must be an object {rule, lease_tokens, pools, fallback_active}, got ", kindName(c))
		p.skip()
		return r
	}
	seen := p.fields(l, "rule, lease_tokens, pools, fallback_active", fleetRuleFields, func(bit int, fl loc) {
		switch bit {
		case frRule:
			if s, ok := p.name(fl); ok {
				r.Rule = s
				p.checkRuleName(fl, s)
			}
		case frLease:
			if v, ok := p.float(fl); ok {
				r.LeaseTokens = v
				if v < 0 {
					p.errorf(fl, fmtFloat(v), " is negative")
				}
			}
		case frPools:
			if v, ok := p.int64(fl); ok {
				r.Pools = v
				if v < 0 {
					p.errorf(fl, strconv.FormatInt(v, 10), " is negative")
				}
			}
		case frFallback:
			r.FallbackActive, _ = p.boolean(fl)
		}
	})
	p.required(l, seen, fleetRuleFields)
	return r
}

// objField is a field of a report object: its name, its bit in the
// object's set of fields seen, and whether it is required.
type objField struct {
	name     string
	bit      int
	required bool
}

// fields reads an object whose fields are listed in known (unknown and
// duplicate fields are errors, naming list), calling field for each known
// one; it returns the bits of the fields seen. A known field's path uses
// its name from known, so a correct report builds no strings.
func (p *parser) fields(l loc, list string, known []objField, field func(bit int, fl loc)) int {
	seen := 0
	p.object(func(key []byte) {
		bit, name := 0, ""
		for _, f := range known {
			if f.name == string(key) {
				bit, name = f.bit, f.name
				break
			}
		}
		if bit == 0 {
			name = string(key)
		}
		fl := p.sub(l, name)
		switch {
		case bit == 0:
			p.errorf(fl, "unknown field; the fields are ", list)
			p.skip()
		case seen&bit != 0:
			p.errorf(fl, "duplicate field")
			p.skip()
		default:
			seen |= bit
			field(bit, fl)
		}
	})
	return seen
}

// sub is the path of field key inside the object at l (l is the zero loc
// for the report itself).
func (p *parser) sub(l loc, key string) loc {
	switch {
	case l.arr != "":
		return l.with(key)
	case l.field == "":
		return loc{field: key}
	}
	return loc{field: l.field + "." + key}
}

// required reports each required field of known missing from seen.
func (p *parser) required(l loc, seen int, known []objField) {
	for _, f := range known {
		if f.required && seen&f.bit == 0 {
			p.errorf(p.sub(l, f.name), "required")
		}
	}
}

// boolean reads true or false.
func (p *parser) boolean(l loc) (bool, bool) {
	switch p.peek() {
	case 't':
		p.i += len("true")
		return true, true
	case 'f':
		p.i += len("false")
		return false, true
	}
	p.errorf(l, "must be true or false, got ", kindName(p.peek()))
	p.skip()
	return false, false
}

// crossCheckFleet: every global rule of the fleet object has counters in
// rules, once.
func (p *parser) crossCheckFleet(r *Report, rules map[string]int) {
	if r.Fleet == nil {
		return
	}
	seen := map[string]int{}
	for i, fr := range r.Fleet.Rules {
		l := loc{arr: "fleet.rules", idx: i, field: "rule"}
		if j, dup := seen[fr.Rule]; dup {
			p.errorf(l, quote(fr.Rule), " is also fleet.rules[", strconv.Itoa(j), "]; one entry per rule")
			continue
		}
		seen[fr.Rule] = i
		if _, ok := rules[fr.Rule]; !ok {
			p.errorf(l, quote(fr.Rule), " is not in rules; every global rule has an entry in rules")
		}
	}
}
