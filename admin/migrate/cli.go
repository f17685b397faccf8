package migrate

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage: ratelimit-admin migrate envoy-ratelimit -config CONFIG.yaml -rate-limits RATE_LIMITS.yaml [-scope global|local] [-fleet-cluster NAME] [-o POLICY.json]
       ratelimit-admin migrate ingress-nginx -f INGRESSES.yaml [-status 503] [-annotations-prefix PREFIX] [-o POLICY.json]

envoy-ratelimit converts envoyproxy/ratelimit's configuration (CONFIG.yaml,
the service's domain and descriptors) for the descriptors the Envoy route's
rate_limits build (RATE_LIMITS.yaml: a list of {actions: [...]}, or a route
action or virtual host holding rate_limits).

ingress-nginx converts the limit annotations (limit-rps, limit-rpm,
limit-burst-multiplier, limit-connections, limit-whitelist) of the Ingresses
in INGRESSES.yaml (kubectl get ingress -A -o yaml; other kinds are skipped).

The policy goes to standard output (or -o), what differs to standard error.
Check it, then save it with "ratelimit-admin policy apply" or on the policy
page.
`

// Main runs "ratelimit-admin migrate ARGS" and returns the exit code: 0,
// 1 for a conversion error, 2 for a usage error.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "ingress-nginx" {
		return ingressMain(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "envoy-ratelimit" {
		fmt.Fprint(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "help" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("ratelimit-admin migrate envoy-ratelimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	configPath := fs.String("config", "", "envoyproxy/ratelimit's configuration file (YAML)")
	limitsPath := fs.String("rate-limits", "", "the Envoy route's rate_limits (YAML)")
	var opt Options
	fs.StringVar(&opt.Scope, "scope", "global", `"global" (across Envoys, through the admin's fleet mode) or "local" (per Envoy process)`)
	fs.StringVar(&opt.FleetCluster, "fleet-cluster", "sluice_rls", "the fleet block's cluster (global scope)")
	out := fs.String("o", "", "write the policy to this file instead of standard output")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *configPath == "" || *limitsPath == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	res, err := convertFiles(*configPath, *limitsPath, opt)
	return finish(res, err, *out, stdout, stderr)
}

// ingressMain runs "ratelimit-admin migrate ingress-nginx ARGS".
func ingressMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ratelimit-admin migrate ingress-nginx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	path := fs.String("f", "", "the Ingresses (YAML)")
	var opt IngressOptions
	fs.IntVar(&opt.Status, "status", 503, "the rejection status (the controller's limit-req-status-code)")
	fs.StringVar(&opt.Prefix, "annotations-prefix", "nginx.ingress.kubernetes.io/", "the controller's annotations prefix")
	out := fs.String("o", "", "write the policy to this file instead of standard output")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	doc, err := readInput(*path)
	if err != nil {
		return finish(Result{}, err, "", stdout, stderr)
	}
	res, err := IngressNginx(doc, opt)
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

func convertFiles(configPath, limitsPath string, opt Options) (Result, error) {
	config, err := readInput(configPath)
	if err != nil {
		return Result{}, err
	}
	limits, err := readInput(limitsPath)
	if err != nil {
		return Result{}, err
	}
	return EnvoyRatelimit(config, limits, opt)
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
