package migrate

// hits_addend formats: Envoy reads the hits a request adds to its
// descriptors from the request itself, as an access log field would
// (%REQ(x-cost)%, %DYNAMIC_METADATA(ns:key)%). They become the window
// rules' cost source, read the same way by the filter.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var (
	hitsHeaderFormat   = regexp.MustCompile(`^%(?:REQ|REQUEST_HEADER)\(([^()?:%]+)\)%$`)
	hitsMetadataFormat = regexp.MustCompile(`^%DYNAMIC_METADATA\(([^()?%]+)\)%$`)
)

// hitsFormat is the cost source of a hits_addend format reading one
// request header or one dynamic metadata value; anything else (a field
// of the stream's end such as %BYTES_RECEIVED%, a fallback header, a
// length limit, text around the field) is refused naming field, where
// the format is.
func hitsFormat(field, format string) (string, error) {
	if m := hitsHeaderFormat.FindStringSubmatch(format); m != nil {
		return "header:" + strings.ToLower(strings.TrimSpace(m[1])), nil
	}
	if m := hitsMetadataFormat.FindStringSubmatch(format); m != nil {
		parts := strings.Split(m[1], ":")
		if len(parts) < 2 || slices.Contains(parts, "") {
			return "", fmt.Errorf("%s: %q: want %%DYNAMIC_METADATA(NAMESPACE:KEY)%%, with one key or more", field, format)
		}
		keys := make([]string, len(parts)-1)
		for i, k := range parts[1:] {
			if strings.ContainsAny(k, "[]") {
				return "", fmt.Errorf("%s: %q: a key holding brackets is not converted; write the rule by hand", field, format)
			}
			if strings.ContainsAny(k, ".:") {
				k = "[" + k + "]"
			}
			keys[i] = k
		}
		return "metadata:" + parts[0] + ":" + strings.Join(keys, "."), nil
	}
	return "", fmt.Errorf("%s: %q is not converted: only %%REQ(header)%% (or %%REQUEST_HEADER(header)%%) and %%DYNAMIC_METADATA(namespace:key)%%, alone, read a cost Sluice can read before the request; write the rule by hand", field, format)
}

// requireCost adds to match the condition that source is present,
// refusing a match that already has one on it.
func requireCost(match map[string]any, source, field string) error {
	if _, clash := match[source]; clash {
		return fmt.Errorf("%s: the rule also matches on %s; write the rule by hand", field, source)
	}
	match[source] = map[string]any{"present": true}
	return nil
}

// chargeFormat makes every window rule of p cost what source says, and
// apply only to requests that carry it: Envoy ignores the descriptors of
// a request whose format yields nothing, so such a request is not
// counted, nor limited, by them.
func (c *converter) chargeFormat(path, source string, p *outPolicy) error {
	for i := range p.Rules {
		r := &p.Rules[i]
		w, ok := r.AlgorithmConfig.(*windowConfig)
		if !ok {
			continue
		}
		if r.Match == nil {
			r.Match = map[string]any{}
		}
		if err := requireCost(r.Match, source, path+".hits_addend.format (rule "+r.Name+")"); err != nil {
			return err
		}
		w.CostSource = source
	}
	c.note("%s.hits_addend: the hits become cost_source %s on its rules, each applying only to requests that carry it (Envoy ignores the descriptors of a request without it); a value that is not a positive number costs default_cost 1 in Sluice, where Envoy ignores the descriptor (and a 0 checks without counting)", path, source)
	return nil
}
