package migrate

// The converter of Envoy's local_ratelimit configurations (envoy_local.go):
// which filter a route configuration's entries are for.

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// link gives each filter its route configurations: the one inline in
// its connection manager, the one its rds names, those of its document
// (or EnvoyFilter); and, for typed_per_filter_config entries named after
// no filter there, the filter of that name anywhere in the input.
func (c *elConv) link() error {
	for _, rc := range c.rcs {
		c.labelRoutes(rc)
		near := c.nearFilters(rc)
		for _, f := range near {
			f.attach(rc)
		}
		for _, key := range rc.keys() {
			if slices.ContainsFunc(near, func(f *elFilter) bool { return f.name == key }) {
				continue
			}
			local := c.localEntry(rc, key)
			if local == nil {
				continue // another filter's configuration
			}
			if rc.hcm != nil {
				c.note("%s: a local_ratelimit configuration for %q, a filter its HTTP connection manager does not have: Envoy ignores it", local.path, key)
				continue
			}
			f, err := c.filterNamed(rc, key, local)
			if err != nil {
				return err
			}
			f.attach(rc)
		}
	}
	for _, f := range c.filters {
		if f.hcm != nil && f.hcm.rds != "" && len(f.rcs) == 0 {
			c.note("%s: its routes are in the route configuration %q (RDS), not in the input: only the filter's own configuration is converted", f.path, f.hcm.rds)
		}
	}
	return nil
}

func (f *elFilter) attach(rc *elRouteConfig) {
	if !slices.Contains(f.rcs, rc) {
		f.rcs = append(f.rcs, rc)
	}
}

// nearFilters are the filters a route configuration certainly belongs
// to: its connection manager's, those whose rds names it, else the
// filters outside any connection manager in its document.
func (c *elConv) nearFilters(rc *elRouteConfig) []*elFilter {
	if rc.hcm != nil {
		return rc.hcm.filters
	}
	var byRDS, unit []*elFilter
	for _, f := range c.filters {
		switch {
		case f.implicit:
		case f.hcm != nil && rc.name != "" && f.hcm.rds == rc.name:
			byRDS = append(byRDS, f)
		case f.hcm == nil && f.unit == rc.unit:
			unit = append(unit, f)
		}
	}
	if len(byRDS) > 0 {
		return byRDS
	}
	return unit
}

// filterNamed is the one filter named key in the input, or a filter
// standing for one that is not there.
func (c *elConv) filterNamed(rc *elRouteConfig, key string, local *elEntry) (*elFilter, error) {
	var fs []*elFilter
	for _, f := range c.filters {
		if f.name == key && !f.implicit {
			fs = append(fs, f)
		}
	}
	switch {
	case len(fs) == 1:
		return fs[0], nil
	case len(fs) > 1:
		return nil, fmt.Errorf("%s: several local_ratelimit filters are named %q (%s and %s), and nothing says which one this route configuration is for; convert one listener at a time, or name the route configuration in its connection manager's rds", rc.where(), key, fs[0].path, fs[1].path)
	}
	f := c.implicit[key]
	if f == nil {
		f = &elFilter{name: key, path: local.path, unit: rc.unit, implicit: true}
		c.implicit[key] = f
		c.filters = append(c.filters, f)
		c.note("no local_ratelimit filter named %q in the input: its per-route configurations are converted as if the filter limited nothing itself (the usual setup, enabled per route)", key)
	}
	return f, nil
}

// keys are the entry names of a route configuration, sorted.
func (rc *elRouteConfig) keys() []string {
	seen := map[string]bool{}
	for _, e := range rc.allEntries() {
		seen[e.key] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// allEntries are the typed_per_filter_config entries of a route
// configuration, its virtual hosts and routes.
func (rc *elRouteConfig) allEntries() []elEntry {
	out := slices.Clone(rc.per)
	for _, vh := range rc.vhosts {
		out = append(out, vh.per...)
		for _, r := range vh.routes {
			out = append(out, r.per...)
		}
	}
	return out
}

// localEntry is an entry named key whose value is a LocalRateLimit (or a
// FilterConfig holding one), nil if none.
func (c *elConv) localEntry(rc *elRouteConfig, key string) *elEntry {
	for _, e := range rc.allEntries() {
		if e.key != key {
			continue
		}
		t, v, _ := elTypeOf(e.node, e.path)
		if elIsType(t, elFilterConfigType) {
			t, _, _ = elTypeOf(elField(v, "config"), e.path)
		}
		if elIsType(t, elLocalRateLimitType) {
			return &e
		}
	}
	return nil
}

func (rc *elRouteConfig) where() string {
	if rc.name != "" {
		return fmt.Sprintf("%s (route configuration %q)", rc.path, rc.name)
	}
	return rc.path
}

// labelRoutes names each route for rule names and says which can be
// matched by name.
func (c *elConv) labelRoutes(rc *elRouteConfig) {
	count := map[string]int{}
	for _, vh := range rc.vhosts {
		for _, r := range vh.routes {
			count[r.name]++
		}
	}
	for _, vh := range rc.vhosts {
		for j, r := range vh.routes {
			r.byName = r.name != "" && count[r.name] == 1
			r.specKind, r.spec = elPathSpec(r.match)
			r.label = r.name
			if r.label == "" {
				r.label = elPathLabel(r.match, j)
			}
		}
	}
}

var elLabelUnsafe = regexp.MustCompile(`[^A-Za-z0-9]+`)

// elPathLabel names an unnamed route after its path.
func elPathLabel(m *yaml.Node, j int) string {
	for _, k := range []string{"prefix", "path", "path_separated_prefix"} {
		if v := elField(m, k); v != nil {
			if s := strings.Trim(elLabelUnsafe.ReplaceAllString(elStr(v), "-"), "-"); s != "" {
				return s
			}
			return "root"
		}
	}
	return fmt.Sprintf("route%d", j)
}
