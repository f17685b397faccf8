package migrate

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

const usage = `usage: ratelimit-admin migrate SOURCE [flags] [-o POLICY.json]

SOURCE is one of:

  envoy-ratelimit -config CONFIG.yaml -rate-limits RATE_LIMITS.yaml [-scope global|local] [-fleet-cluster NAME]
      envoyproxy/ratelimit's configuration (CONFIG.yaml, the service's
      domain and descriptors) for the descriptors the Envoy route's
      rate_limits build (RATE_LIMITS.yaml: a list of {actions: [...]}, or a
      route action or virtual host holding rate_limits).

  envoy-local-ratelimit -f ENVOY.yaml
      Envoy's local_ratelimit filters and their per-route configurations, with
      the route actions that build their descriptors: a bootstrap, listeners,
      a connection manager or route configurations (YAML or JSON), or Istio
      EnvoyFilters.

  ingress-nginx -f INGRESSES.yaml [-status 503] [-annotations-prefix PREFIX]
      the limit annotations (limit-rps, limit-rpm, limit-burst-multiplier,
      limit-connections, limit-whitelist) of the Ingresses in INGRESSES.yaml
      (kubectl get ingress -A -o yaml; other kinds are skipped).

  nginx -f NGINX.conf [-conf-dir /etc/nginx]
      the limit_req and limit_conn limits of an nginx configuration (nginx.conf,
      or a part of its http block), following its include directives as nginx
      does: relative names are read from the directory of NGINX.conf, and so
      are absolute names under -conf-dir (default /etc/nginx), so a copy of
      /etc/nginx converts like the original.

  kong -f KONG.yaml [-consumer-key SOURCE] [-fleet-cluster NAME]
      the rate-limiting plugins of Kong's declarative configuration (decK or
      DB-less kong.yaml: services, routes, consumers, plugins), or of
      KongPlugin and KongClusterPlugin objects, applied where the
      konghq.com/plugins annotations of the Ingresses, HTTPRoutes, Services
      and KongConsumers given with them (and HTTPRoute ExtensionRef filters)
      attach them; -consumer-key is the key
      source consumers are known by (default: the header of key-auth's first
      key_names, else header:apikey).

  higress -f WASMPLUGINS.yaml [-plugin NAME] [-scope global|local] [-fleet-cluster NAME] [-default-cost N]
      Higress's key-rate-limit, cluster-key-rate-limit and ai-token-ratelimit:
      the WasmPlugins in WASMPLUGINS.yaml (kubectl get wasmplugins -A -o yaml;
      other kinds and plugins are skipped), or one plugin's configuration
      (-plugin names it when its fields do not).

  envoy-gateway -f OBJECTS.yaml [-scope global|local] [-fleet-cluster NAME]
      Envoy Gateway's rate limits: the rateLimit of the BackendTrafficPolicies
      in OBJECTS.yaml, with the HTTPRoutes, GRPCRoutes and Gateways they
      target (kubectl get backendtrafficpolicy,httproute,grpcroute,gateway
      -A -o yaml; other kinds are skipped); -scope is that of the rules of
      rateLimit.global.

The policy goes to standard output (or -o), what differs to standard error.
Check it, then save it with "ratelimit-admin policy apply" or on the policy
page, whose conversion form and API (POST /api/v1/policy/migrate) take the
same sources.
`

// errUsage says the command line is incomplete: Main prints the usage.
var errUsage = errors.New("usage")

// A command declares a source's flags and returns what reads them, after
// parsing, into the conversion's Input.
type command func(fs *flag.FlagSet) func() (Input, error)

var commands = map[string]command{
	"envoy-ratelimit": func(fs *flag.FlagSet) func() (Input, error) {
		config := fs.String("config", "", "envoyproxy/ratelimit's configuration file (YAML)")
		limits := fs.String("rate-limits", "", "the Envoy route's rate_limits (YAML)")
		scope := fs.String("scope", "global", `"global" (across Envoys, through the admin's fleet mode) or "local" (per Envoy process)`)
		cluster := fs.String("fleet-cluster", "sluice_rls", "the fleet block's cluster (global scope)")
		return func() (Input, error) {
			if *config == "" || *limits == "" {
				return Input{}, errUsage
			}
			in := Input{From: "envoy-ratelimit", Scope: *scope, FleetCluster: *cluster}
			var err error
			if in.Config, err = readInput(*config); err != nil {
				return in, err
			}
			in.RateLimits, err = readInput(*limits)
			return in, err
		}
	},
	"envoy-local-ratelimit": fileOnly("envoy-local-ratelimit", "Envoy's configuration, or Istio EnvoyFilters (YAML or JSON)"),
	"ingress-nginx": func(fs *flag.FlagSet) func() (Input, error) {
		path := fs.String("f", "", "the Ingresses (YAML)")
		status := fs.Int("status", 503, "the rejection status (the controller's limit-req-status-code)")
		prefix := fs.String("annotations-prefix", "nginx.ingress.kubernetes.io/", "the controller's annotations prefix")
		return func() (Input, error) {
			in := Input{From: "ingress-nginx", Status: *status, AnnotationsPrefix: *prefix}
			return in, readFile(*path, &in.Config)
		}
	},
	"nginx": func(fs *flag.FlagSet) func() (Input, error) {
		path := fs.String("f", "", "the nginx configuration (nginx.conf); its includes are read from its directory")
		confDir := fs.String("conf-dir", DefaultNginxConfDir, "the directory of -f as the configuration's absolute include paths name it")
		return func() (Input, error) {
			in := Input{From: "nginx", ConfDir: *confDir}
			if *path != "" {
				in.Files = os.DirFS(filepath.Dir(*path))
			}
			return in, readFile(*path, &in.Config)
		}
	},
	"kong": func(fs *flag.FlagSet) func() (Input, error) {
		path := fs.String("f", "", "Kong's declarative configuration, or KongPlugin objects (YAML or JSON)")
		consumer := fs.String("consumer-key", "", "the key source consumers are known by (default: key-auth's header)")
		cluster := fs.String("fleet-cluster", "sluice_rls", "the fleet block's cluster (plugins with policy redis or cluster)")
		return func() (Input, error) {
			in := Input{From: "kong", ConsumerKey: *consumer, FleetCluster: *cluster}
			return in, readFile(*path, &in.Config)
		}
	},
	"higress": func(fs *flag.FlagSet) func() (Input, error) {
		path := fs.String("f", "", "the WasmPlugins, or one plugin's configuration (YAML)")
		plugin := fs.String("plugin", "", "the plugin of a bare configuration: key-rate-limit, cluster-key-rate-limit or ai-token-ratelimit")
		scope := fs.String("scope", "global", `the rules of cluster-key-rate-limit and ai-token-ratelimit: "global" (counted across Envoys, as in Higress's Redis) or "local"`)
		cluster := fs.String("fleet-cluster", "sluice_rls", "the fleet block's cluster (global scope)")
		cost := fs.Int("default-cost", 100, "ai-token-ratelimit: the tokens an answer that reports no usage costs")
		return func() (Input, error) {
			in := Input{From: "higress", Plugin: *plugin, Scope: *scope, FleetCluster: *cluster, DefaultCost: *cost}
			return in, readFile(*path, &in.Config)
		}
	},
	"envoy-gateway": func(fs *flag.FlagSet) func() (Input, error) {
		path := fs.String("f", "", "the BackendTrafficPolicies, with the routes and Gateways they target (YAML)")
		scope := fs.String("scope", "global", `the rules of rateLimit.global: "global" (counted across Envoys, as in Envoy Gateway's rate limit service) or "local"`)
		cluster := fs.String("fleet-cluster", "sluice_rls", "the fleet block's cluster (global scope)")
		return func() (Input, error) {
			in := Input{From: "envoy-gateway", Scope: *scope, FleetCluster: *cluster}
			return in, readFile(*path, &in.Config)
		}
	},
}

// fileOnly is the command of a source that reads one file (-f) and no
// choice.
func fileOnly(from, what string) command {
	return func(fs *flag.FlagSet) func() (Input, error) {
		path := fs.String("f", "", what)
		return func() (Input, error) {
			in := Input{From: from}
			return in, readFile(*path, &in.Config)
		}
	}
}

// readFile reads the file a -f flag names into dst; an empty path is a
// usage error.
func readFile(path string, dst *[]byte) error {
	if path == "" {
		return errUsage
	}
	var err error
	*dst, err = readInput(path)
	return err
}

// Main runs "ratelimit-admin migrate ARGS" and returns the exit code: 0,
// 1 for a conversion error, 2 for a usage error.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || commands[args[0]] == nil {
		fmt.Fprint(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "help" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("ratelimit-admin migrate "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	read := commands[args[0]](fs)
	out := fs.String("o", "", "write the policy to this file instead of standard output")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	in, err := read()
	if errors.Is(err, errUsage) || fs.NArg() > 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err != nil {
		return finish(Result{}, err, "", stdout, stderr)
	}
	res, err := Convert(in)
	return finish(res, err, *out, stdout, stderr)
}

// finish writes a conversion's policy (to out, or stdout) and notes, or
// its error, and returns the exit code.
func finish(res Result, err error, out string, stdout, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintln(stderr, "ratelimit-admin migrate:", err)
		return 1
	}
	for _, n := range res.Notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	if out != "" {
		if err := os.WriteFile(out, res.Policy, 0o644); err != nil {
			fmt.Fprintln(stderr, "ratelimit-admin migrate:", err)
			return 1
		}
		return 0
	}
	_, _ = stdout.Write(res.Policy)
	return 0
}

// readInput reads a file of at most maxInput bytes (more is refused by
// the conversion, naming the document).
func readInput(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxInput+1))
}
