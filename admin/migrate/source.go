package migrate

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
)

// A Source is a rate limiter whose configuration converts. The admin's
// API and page offer every one of Sources by its Name.
type Source struct {
	Name   string // as the command and the API name it: "envoy-ratelimit"
	Title  string // as its users know it: "envoyproxy/ratelimit"
	Config string // what its configuration document is, for a form's label
	// Reads are the inputs it reads besides the configuration, by their
	// API names (Input's fields).
	Reads   []string
	convert func(Input) (Result, error)
}

// Input is one conversion's documents and choices, as the admin's API and
// page take them. A choice the source does not read must be left zero.
type Input struct {
	From         string // a Source's Name; "envoy-ratelimit" when empty
	Config       []byte // the source's configuration
	RateLimits   []byte // envoy-ratelimit: the Envoy route's rate_limits
	Scope        string // envoy-ratelimit, higress, envoy-gateway: "global" (default) or "local"
	FleetCluster string // the fleet block's cluster of global rules
	Status       int    // ingress-nginx: the rejection status (default 503)
	// AnnotationsPrefix is ingress-nginx's annotations prefix (default
	// "nginx.ingress.kubernetes.io/").
	AnnotationsPrefix string
	ConsumerKey       string // kong: the key source consumers are known by
	Plugin            string // higress: the plugin of a bare configuration
	DefaultCost       int    // higress: ai-token-ratelimit's tokens for an answer without usage
	Taken             []string
	// Files and ConfDir are nginx's configuration directory, where its
	// includes are followed (NginxOptions): the command line sets them,
	// the API and the policy page, which take one text, do not.
	Files   fs.FS
	ConfDir string
}

// Sources are the rate limiters a configuration converts from.
var Sources = []Source{
	{Name: "envoy-ratelimit", Title: "envoyproxy/ratelimit", Config: "the service's configuration (YAML: domain, descriptors)",
		Reads: []string{"rate_limits", "scope", "fleet_cluster"}, convert: convertEnvoyRatelimitInput},
	{Name: "envoy-local-ratelimit", Title: "Envoy local_ratelimit", Config: "Envoy's configuration (YAML or JSON: a bootstrap, listeners, a connection manager, route configurations) or Istio EnvoyFilters",
		convert: func(in Input) (Result, error) { return EnvoyLocalRatelimit(in.Config, LocalOptions{Taken: in.Taken}) }},
	{Name: "ingress-nginx", Title: "ingress-nginx annotations", Config: "the Ingresses (YAML: kubectl get ingress -A -o yaml)",
		Reads: []string{"status", "annotations_prefix"}, convert: convertIngressNginxInput},
	{Name: "nginx", Title: "nginx limit_req and limit_conn", Config: "nginx.conf, or a part of its http block (include directives are followed by the command line only)",
		convert: func(in Input) (Result, error) {
			return Nginx(in.Config, NginxOptions{Taken: in.Taken, Files: in.Files, ConfDir: in.ConfDir})
		}},
	{Name: "kong", Title: "Kong rate-limiting", Config: "Kong's declarative configuration (kong.yaml, YAML or JSON), or KongPlugin and KongClusterPlugin objects with the Ingresses, HTTPRoutes, Services and KongConsumers that attach them",
		Reads: []string{"consumer_key", "fleet_cluster"}, convert: func(in Input) (Result, error) {
			return Kong(in.Config, KongOptions{ConsumerKey: in.ConsumerKey, FleetCluster: in.FleetCluster, Taken: in.Taken})
		}},
	{Name: "higress", Title: "Higress", Config: "WasmPlugins of key-rate-limit, cluster-key-rate-limit or ai-token-ratelimit (YAML), or one plugin's configuration",
		Reads: []string{"scope", "fleet_cluster", "plugin", "default_cost"}, convert: convertHigressInput},
	{Name: "envoy-gateway", Title: "Envoy Gateway", Config: "BackendTrafficPolicies with a rateLimit, with the HTTPRoutes, GRPCRoutes and Gateways they target (YAML: kubectl get backendtrafficpolicy,httproute,grpcroute,gateway -A -o yaml)",
		Reads: []string{"scope", "fleet_cluster"}, convert: func(in Input) (Result, error) {
			return EnvoyGateway(in.Config, EnvoyGatewayOptions{Scope: in.Scope, FleetCluster: in.FleetCluster, Taken: in.Taken})
		}},
}

// SourceNamed returns the source called name; "" is the first source,
// envoy-ratelimit.
func SourceNamed(name string) (Source, bool) {
	if name == "" {
		return Sources[0], true
	}
	for _, s := range Sources {
		if s.Name == name {
			return s, true
		}
	}
	return Source{}, false
}

// Convert runs the conversion in.From names. Its errors are *InputError
// naming the input at fault: "from", "config", or one of Source.Reads.
func Convert(in Input) (Result, error) {
	src, ok := SourceNamed(in.From)
	if !ok {
		return Result{}, &InputError{"from", fmt.Errorf("from %q: want one of %s", in.From, sourceNames())}
	}
	choices := in.choices()
	for _, field := range slices.Sorted(maps.Keys(choices)) {
		if choices[field] && !slices.Contains(src.Reads, field) {
			return Result{}, &InputError{field, fmt.Errorf("%s: not read when converting from %s; leave it out", field, src.Name)}
		}
	}
	if strings.TrimSpace(string(in.Config)) == "" {
		return Result{}, &InputError{"config", fmt.Errorf("config: required: %s", src.Config)}
	}
	res, err := src.convert(in)
	var ie *InputError
	if err != nil && !errors.As(err, &ie) {
		err = &InputError{"config", err}
	}
	return res, err
}

// choices tells, by API name, which of the choices in sets.
func (in Input) choices() map[string]bool {
	return map[string]bool{"rate_limits": len(in.RateLimits) > 0, "scope": in.Scope != "", "fleet_cluster": in.FleetCluster != "",
		"status": in.Status != 0, "annotations_prefix": in.AnnotationsPrefix != "", "consumer_key": in.ConsumerKey != "", "plugin": in.Plugin != "", "default_cost": in.DefaultCost != 0}
}

func sourceNames() string {
	names := make([]string, len(Sources))
	for i, s := range Sources {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

func convertEnvoyRatelimitInput(in Input) (Result, error) {
	if strings.TrimSpace(string(in.RateLimits)) == "" {
		return Result{}, &InputError{"rate_limits", fmt.Errorf("rate_limits: required: the Envoy route's rate_limits (YAML), whose actions say what each descriptor key is")}
	}
	return EnvoyRatelimit(in.Config, in.RateLimits, Options{Scope: in.Scope, FleetCluster: in.FleetCluster, Taken: in.Taken})
}

func convertIngressNginxInput(in Input) (Result, error) {
	if in.Status != 0 && (in.Status < 400 || in.Status > 599) {
		return Result{}, &InputError{"status", fmt.Errorf("status: %d: want an HTTP status from 400 to 599 (default 503)", in.Status)}
	}
	return IngressNginx(in.Config, IngressOptions{Status: in.Status, Prefix: in.AnnotationsPrefix, Taken: in.Taken})
}

func convertHigressInput(in Input) (Result, error) {
	return Higress(in.Config, HigressOptions{Plugin: in.Plugin, Scope: in.Scope, FleetCluster: in.FleetCluster, DefaultCost: in.DefaultCost, Taken: in.Taken})
}
