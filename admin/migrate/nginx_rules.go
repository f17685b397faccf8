package migrate

// The converter of nginx configurations (nginx.go): a zone's rules at each
// place, simplified, and the zones that can share a policy.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ngxRule is what one zone does at one spot of one group: limit, or not
// (an unlimited rule, so that a later rule of the zone does not take the
// request).
type ngxRule struct {
	zone   *ngxZone
	group  *ngxGroup
	spot   *ngxSpot
	limit  bool
	req    *ngxReq
	conn   *ngxConn
	status int
	dry    bool
}

func (r *ngxRule) same(o *ngxRule) bool {
	if !r.limit || !o.limit {
		return r.limit == o.limit
	}
	return r.zone == o.zone && r.status == o.status && r.dry == o.dry &&
		(r.req == nil) == (o.req == nil) && (r.req == nil || r.req.burst == o.req.burst && r.req.delay == o.req.delay) &&
		(r.conn == nil) == (o.conn == nil) && (r.conn == nil || r.conn.n == o.conn.n)
}

func (r *ngxRule) disjoint(o *ngxRule) bool {
	return r.spot.path.disjoint(&o.spot.path) || r.group.host.disjoint(&o.group.host)
}

func (r *ngxRule) covers(o *ngxRule) bool {
	return r.group.host.covers(&o.group.host) && r.spot.path.covers(&o.spot.path)
}

// ngxBuilder makes the policy.
type ngxBuilder struct {
	r      *ngxReader
	c      *converter
	groups []*ngxGroup
	spots  map[*ngxServer][]ngxSpot
	nrules int
	// bigZones are the zones holding more states than max_keys' default
	bigZones []string
}

// zoneRules are a zone's rules for every group and spot, in order.
func (b *ngxBuilder) zoneRules(z *ngxZone) ([]*ngxRule, error) {
	var out []*ngxRule
	for _, g := range b.groups {
		spots := b.spots[g.server]
		for i := range spots {
			sp := &spots[i]
			eff := &g.server.eff
			if sp.loc != nil {
				eff = &sp.loc.eff
			}
			r := &ngxRule{zone: z, group: g, spot: sp}
			if !g.server.redirect() && !eff.returns {
				r.fill(eff)
			}
			out = append(out, r)
		}
		if b.nrules += len(spots); b.nrules > ngxMaxRules {
			return nil, fmt.Errorf("%s: its servers and locations make more than %d rules; convert fewer servers at a time", nginxDoc, ngxMaxRules)
		}
	}
	return out, nil
}

func (r *ngxRule) fill(eff *ngxEff) {
	if r.zone.conn {
		for i := range eff.conns {
			if c := &eff.conns[i]; c.zone == r.zone.name {
				r.limit, r.conn, r.status, r.dry = true, c, eff.connStatus, eff.connDry
			}
		}
		return
	}
	for i := range eff.reqs {
		if q := &eff.reqs[i]; q.zone == r.zone.name {
			r.limit, r.req, r.status, r.dry = true, q, eff.reqStatus, eff.reqDry
		}
	}
}

// simplify drops the rules that change nothing: those an earlier rule
// always takes first; a limit rule whose requests all go on to an
// identical rule that holds for them; an unlimited rule that no later limit
// rule could take the requests of.
func simplify(rules []*ngxRule) []*ngxRule {
	var reached []*ngxRule
	for _, r := range rules {
		if !slices.ContainsFunc(reached, func(e *ngxRule) bool { return e.covers(r) }) {
			reached = append(reached, r)
		}
	}
	var later []*ngxRule // kept, last first
	for i := len(reached) - 1; i >= 0; i-- {
		r := reached[i]
		if !r.needed(later) {
			continue
		}
		if absorbed, ok := r.absorbedBy(later); ok {
			later = absorbed
			continue
		}
		later = append(later, r)
	}
	slices.Reverse(later)
	return later
}

// absorbedBy lets a later identical rule that holds for a regex
// location's requests take them, so that one bucket counts them as
// nginx's one zone does: the rules between, which would take some of them
// first, leave them out with a "not regex" condition (an exact one, which
// could only hold for them, goes). It returns the later rules so changed,
// or false when a rule between has a regex, a host of its own or a path
// outside the regex's prefix.
func (r *ngxRule) absorbedBy(later []*ngxRule) ([]*ngxRule, bool) {
	a := &r.spot.path
	if !r.limit || a.re == nil || a.not != "" {
		return nil, false
	}
	var between []int
	for i := len(later) - 1; i >= 0; i-- {
		l := later[i]
		switch {
		case r.disjoint(l):
			continue
		case l.same(r) && l.covers(r):
			out := slices.Clone(later)
			for _, j := range between { // from the nearest
				if out[j].spot.path.isExact {
					out = slices.Delete(out, j, j+1)
					continue
				}
				c, spot := *out[j], *out[j].spot
				spot.path.nots = append(slices.Clip(spot.path.nots), a.regex)
				spot.path.not = ngxAlternation(spot.path.nots)
				spot.path.notRe = regexp.MustCompile(spot.path.not)
				c.spot = &spot
				out[j] = &c
			}
			return out, true
		case !r.group.host.covers(&l.group.host):
			return nil, false
		case l.spot.path.isExact:
		case l.spot.path.regex != "" || !strings.HasPrefix(l.spot.path.prefix, a.prefix):
			return nil, false
		}
		between = append(between, i)
	}
	return nil, false
}

func (r *ngxRule) needed(later []*ngxRule) bool {
	if !r.limit && !slices.ContainsFunc(later, func(l *ngxRule) bool { return l.limit && !r.disjoint(l) }) {
		return false
	}
	for i := len(later) - 1; i >= 0; i-- {
		if l := later[i]; !r.disjoint(l) {
			return !(l.same(r) && l.covers(r))
		}
	}
	return true
}

// ngxPolicy is the rules of one or more zones.
type ngxPolicy struct {
	zones []*ngxZone
	rules []*ngxRule
}

// mergeDisjoint puts zones whose rules cannot apply to the same request in
// one policy: each request then meets the rules of one of them only.
func mergeDisjoint(pols []*ngxPolicy) []*ngxPolicy {
	var out []*ngxPolicy
	for _, p := range pols {
		i := slices.IndexFunc(out, func(m *ngxPolicy) bool {
			return !slices.ContainsFunc(m.rules, func(a *ngxRule) bool {
				return slices.ContainsFunc(p.rules, func(b *ngxRule) bool { return !a.disjoint(b) })
			})
		})
		if i < 0 {
			out = append(out, &ngxPolicy{zones: slices.Clone(p.zones), rules: slices.Clone(p.rules)})
			continue
		}
		out[i].zones = append(out[i].zones, p.zones...)
		out[i].rules = append(out[i].rules, p.rules...)
	}
	return out
}
