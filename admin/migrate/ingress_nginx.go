package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// IngressOptions are the choices a conversion of Ingresses cannot read
// from them.
type IngressOptions struct {
	// Prefix is the annotations' prefix (default
	// "nginx.ingress.kubernetes.io/", the controller's
	// --annotations-prefix).
	Prefix string
	// Status is the rejection status (default 503, the controller's
	// limit-req-status-code and limit-conn-status-code).
	Status int
	// Taken are rule and policy names the conversion must not use
	// (Options.Taken).
	Taken []string
}

// ingress is the part of a Kubernetes Ingress the conversion reads.
type ingress struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec  kubeIngressSpec `yaml:"spec"`
	Items []ingress       `yaml:"items"` // a List
}

// ingressLimits are the limit annotations of one Ingress.
type ingressLimits struct {
	rps, rpm, conns, mult int
	whitelist             []string
}

// IngressNginx converts the rate limit annotations of ingress-nginx
// Ingresses (a YAML stream of Kubernetes objects, Lists included; other
// kinds are skipped) into a policy: per Ingress, a policy for each of
// limit-rps, limit-rpm and limit-connections, matching the Ingress's hosts
// and paths, keyed by the client address, the whitelist left out
// (docs/migrating.md, "ingress-nginx annotations").
func IngressNginx(doc []byte, opt IngressOptions) (Result, error) {
	if len(doc) > maxInput {
		return Result{}, fmt.Errorf("ingresses: %d bytes, more than the %d a conversion reads", len(doc), maxInput)
	}
	if opt.Prefix == "" {
		opt.Prefix = "nginx.ingress.kubernetes.io/"
	}
	if opt.Status == 0 {
		opt.Status = 503
	}
	ings, err := readIngresses(doc)
	if err != nil {
		return Result{}, err
	}
	c := newConverter(opt.Taken)
	hosts := map[string][]string{} // host -> the Ingresses limiting it
	var pols []outPolicy
	for i, ing := range ings {
		what := fmt.Sprintf("ingresses[%d] (%s)", i, ingressName(ing))
		lim, ok, err := readLimits(what, ing.Metadata.Annotations, opt.Prefix)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			continue
		}
		for _, k := range []string{"limit-rate", "limit-rate-after"} {
			if _, set := ing.Metadata.Annotations[opt.Prefix+k]; set {
				c.noteOnce(k + " (bytes per second of a response) is not converted: Sluice limits requests, not bandwidth")
			}
		}
		match, hs, err := ingressMatch(what, ing, opt.Prefix, lim.whitelist)
		if err != nil {
			return Result{}, err
		}
		for _, h := range hs {
			hosts[h] = append(hosts[h], ingressName(ing))
		}
		pols = append(pols, c.ingressPolicies(ing, lim, match)...)
	}
	if len(pols) == 0 {
		return Result{}, fmt.Errorf("ingresses: no Ingress has a limit-rps, limit-rpm or limit-connections annotation (prefix %q)", opt.Prefix)
	}
	for _, h := range slices.Sorted(maps.Keys(hosts)) {
		if ns := hosts[h]; len(ns) > 1 {
			c.note("host %s is limited by several Ingresses (%s): a request whose path two of them match is limited by both, where ingress-nginx routes it to one", h, strings.Join(ns, ", "))
		}
	}
	c.noteOnce("limits hold per Envoy process, as ingress-nginx's per controller pod")
	c.noteOnce("set the policy's xff_trusted_hops as the controller's use-forwarded-headers and proxy setup require, so both read the same client address")
	return c.policyOf(struct {
		RejectStatus int         `json:"reject_status"`
		Policies     []outPolicy `json:"policies"`
	}{opt.Status, pols})
}

func ingressName(ing ingress) string {
	if ing.Metadata.Namespace == "" {
		return ing.Metadata.Name
	}
	return ing.Metadata.Namespace + "/" + ing.Metadata.Name
}

// readIngresses reads every Ingress of a YAML stream, Lists opened.
func readIngresses(doc []byte) ([]ingress, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var out []ingress
	for n := 0; ; n++ {
		var obj ingress
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ingresses: document %d: %s", n+1, yamlError(err))
		}
		for _, o := range append([]ingress{obj}, obj.Items...) {
			if o.Kind == "Ingress" {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// readLimits reads an Ingress's limit annotations; ok is false when it
// has none.
func readLimits(what string, ann map[string]string, prefix string) (ingressLimits, bool, error) {
	lim := ingressLimits{mult: 5}
	for _, a := range []struct {
		name string
		dst  *int
		min  int
	}{{"limit-rps", &lim.rps, 1}, {"limit-rpm", &lim.rpm, 1}, {"limit-connections", &lim.conns, 1}, {"limit-burst-multiplier", &lim.mult, 1}} {
		v, set := ann[prefix+a.name]
		if !set {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < a.min || n > math.MaxInt32 {
			return lim, false, fmt.Errorf("%s: annotation %s%s %q: want a whole number of at least %d", what, prefix, a.name, v, a.min)
		}
		*a.dst = n
	}
	if v := strings.TrimSpace(ann[prefix+"limit-whitelist"]); v != "" {
		for _, c := range strings.Split(v, ",") {
			c = strings.TrimSpace(c)
			if _, err := netip.ParsePrefix(c); err != nil {
				if _, err := netip.ParseAddr(c); err != nil {
					return lim, false, fmt.Errorf("%s: annotation %slimit-whitelist: %q is not an address or CIDR block", what, prefix, c)
				}
			}
			lim.whitelist = append(lim.whitelist, c)
		}
	}
	return lim, lim.rps > 0 || lim.rpm > 0 || lim.conns > 0, nil
}

// ingressMatch is the match of an Ingress's rules: its hosts (none when a
// rule has no host: it serves any), its paths (none when one is the whole
// site), the whitelist left out. It returns the hosts too.
func ingressMatch(what string, ing ingress, prefix string, whitelist []string) (map[string]any, []string, error) {
	match := map[string]any{}
	var hosts, paths []string
	anyHost, wholeSite := len(ing.Spec.Rules) == 0, len(ing.Spec.Rules) == 0
	useRegex := ing.Metadata.Annotations[prefix+"use-regex"] == "true"
	for i, r := range ing.Spec.Rules {
		if r.Host == "" {
			anyHost = true
		} else if !slices.Contains(hosts, strings.ToLower(r.Host)) {
			hosts = append(hosts, strings.ToLower(r.Host))
		}
		if len(r.HTTP.Paths) == 0 {
			wholeSite = true
		}
		for j, p := range r.HTTP.Paths {
			re, whole, err := pathRegex(p.Path, p.PathType, useRegex)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: spec.rules[%d].http.paths[%d]: %v", what, i, j, err)
			}
			wholeSite = wholeSite || whole
			if !slices.Contains(paths, re) {
				paths = append(paths, re)
			}
		}
	}
	if !anyHost {
		match["host"] = map[string]any{"in": hosts}
	}
	if !wholeSite {
		re := "^(?:" + strings.Join(paths, "|") + ")"
		if useRegex {
			re = "(?i)" + re
		}
		match["path"] = map[string]any{"regex": re}
	}
	if len(whitelist) > 0 {
		match["ip:address"] = map[string]any{"not": map[string]any{"cidr": whitelist}}
	}
	return match, hosts, nil
}

// pathRegex is an Ingress path as a regular expression over the request
// path: Prefix matches whole segments, Exact the path alone,
// ImplementationSpecific (ingress-nginx: a string prefix) the start, and
// with use-regex the path is a regular expression already. whole: it
// matches every path.
func pathRegex(path, pathType string, useRegex bool) (re string, whole bool, err error) {
	if path == "" {
		path = "/"
	}
	if useRegex {
		if _, err := regexp.Compile(path); err != nil {
			return "", false, fmt.Errorf("path %q (use-regex): %v", path, err)
		}
		return "(?:" + path + ")", path == "/", nil
	}
	switch pathType {
	case "Exact":
		return regexp.QuoteMeta(path) + "$", false, nil
	case "Prefix":
		trimmed := strings.TrimRight(path, "/")
		return regexp.QuoteMeta(trimmed) + "(?:/|$)", trimmed == "", nil
	case "ImplementationSpecific", "":
		return regexp.QuoteMeta(path), path == "/", nil
	}
	return "", false, fmt.Errorf("pathType %q: want Exact, Prefix or ImplementationSpecific", pathType)
}

// ingressPolicies are an Ingress's policies, one per limit annotation.
func (c *converter) ingressPolicies(ing ingress, lim ingressLimits, match map[string]any) []outPolicy {
	base := strings.ReplaceAll(ingressName(ing), "/", "-")
	var out []outPolicy
	add := func(suffix string, r outRule) {
		r.Name = c.rules.take(base + "-" + suffix)
		r.LimitKeys = []string{"ip:address"}
		if len(match) > 0 {
			r.Match = match
		}
		out = append(out, outPolicy{Name: c.pols.take(base + "-" + suffix), Rules: []outRule{r}})
	}
	// nginx's burst=B nodelay admits 1 + B at once: Sluice's burst is one more.
	if lim.rps > 0 {
		add("rps", outRule{Algorithm: policy.AlgorithmTokenBucket, AlgorithmConfig: &bucketConfig{TokensPerSecond: float64(lim.rps), Burst: lim.rps*lim.mult + 1}})
	}
	if lim.rpm > 0 {
		add("rpm", outRule{Algorithm: policy.AlgorithmTokenBucket, AlgorithmConfig: &bucketConfig{TokensPerSecond: float64(lim.rpm) / 60, Burst: lim.rpm*lim.mult + 1}})
	}
	if lim.conns > 0 {
		add("connections", outRule{Algorithm: policy.AlgorithmConcurrency, AlgorithmConfig: &windowConfig{Limit: lim.conns}})
	}
	return out
}
