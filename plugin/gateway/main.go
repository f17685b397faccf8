// Command ratelimit-gateway is Sluice's development gateway: an HTTP server
// that runs bin/ratelimit.wasm in the project's Envoy-faithful host
// (plugin/wasmhost), passes every request through the plugin and proxies the
// allowed ones to an upstream. It lets you try the filter with curl without
// installing Envoy. It is not a production proxy: use Envoy for that.
//
//	ratelimit-gateway -upstream http://127.0.0.1:8081 -config policy.json
//	ratelimit-gateway -upstream demo              # built-in echo upstream
//	ratelimit-gateway -xds 127.0.0.1:18000        # policy from the admin over ECDS
//	ratelimit-gateway -cluster sluice_admin=http://127.0.0.1:9000  # answer the plugin's telemetry callouts
//	ratelimit-gateway -vm-env SLUICE_TELEMETRY_TOKEN  # pass a variable to the plugin VMs (telemetry.token_env)
//
// Every flag can also be set from the environment (SLUICE_LISTEN, ...).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit-gateway:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	opts, err := parseOptions(args)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, opts, logger, os.Stdout)
}

// serve runs the gateway until ctx ends: it prints where it runs (and, for
// the demo policy, what to try) to out, and sends the demo traffic.
func serve(ctx context.Context, opts Options, logger *slog.Logger, out io.Writer) error {
	gw, err := Start(ctx, opts, logger)
	if err != nil {
		return err
	}
	printTryIt(out, gw, gw.config())
	go demoTraffic(ctx, gw.URL(), opts.DemoTraffic)
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return gw.Close(shutdownCtx)
}

// parseOptions reads flags, each defaulting to its environment variable.
func parseOptions(args []string) (Options, error) {
	fs := flag.NewFlagSet("ratelimit-gateway", flag.ContinueOnError)
	var o Options
	fs.StringVar(&o.Listen, "listen", env("SLUICE_LISTEN", "127.0.0.1:8080"), "address to serve on (SLUICE_LISTEN)")
	fs.StringVar(&o.Upstream, "upstream", env("SLUICE_UPSTREAM", "demo"), `upstream base URL, or "demo" for a built-in echo server (SLUICE_UPSTREAM)`)
	fs.StringVar(&o.ConfigPath, "config", env("SLUICE_CONFIG", "plugin/gateway/demo-config.json"), "plugin configuration file, JSON; reloaded when it changes (SLUICE_CONFIG)")
	fs.StringVar(&o.WasmPath, "wasm", env("SLUICE_WASM", "bin/ratelimit.wasm"), "the plugin module (SLUICE_WASM)")
	vms, err := envInt("SLUICE_VMS", 2)
	if err != nil {
		return o, err
	}
	fs.IntVar(&o.VMs, "vms", vms, "worker VMs, like Envoy's --concurrency (SLUICE_VMS)")
	fs.IntVar(&o.DemoTraffic, "demo-traffic", 0, "send this many requests per second through the gateway (a mix of clients, for the dashboard demo)")
	fs.DurationVar(&o.ReloadInterval, "reload-interval", time.Second, "how often the config file is checked for changes")
	fs.StringVar(&o.XDS, "xds", env("SLUICE_XDS", ""), "the admin's xDS address, host:port: take the configuration from the admin over ECDS\n"+
		"instead of watching -config, which then only serves until the first update (SLUICE_XDS)")
	fs.StringVar(&o.XDSResource, "xds-resource", env("SLUICE_XDS_RESOURCE", defaultXDSResource), "the ECDS resource to subscribe to (SLUICE_XDS_RESOURCE)")
	fs.StringVar(&o.NodeID, "node-id", env("SLUICE_NODE_ID", defaultNodeID()), "node id reported to the admin over xDS (SLUICE_NODE_ID)")
	clusters := &listFlag{specs: splitList(env("SLUICE_CLUSTERS", ""))}
	fs.Var(clusters, "cluster", "name=http://host:port (or https://, h2c:// for HTTP/2 cleartext, e.g. a gRPC rate limit service): a cluster the plugin may call with dispatch_http_call, e.g. its telemetry\n"+
		"reports to the admin (repeatable; SLUICE_CLUSTERS=\"a=url,b=url\")")
	vmEnv := &listFlag{specs: splitList(env("SLUICE_VM_ENV", ""))}
	fs.Var(vmEnv, "vm-env", "NAME=VALUE, or NAME to copy it from this process's environment: a variable of the plugin VMs (Envoy's\n"+
		"vm_config.environment_variables), e.g. -vm-env SLUICE_TELEMETRY_TOKEN for telemetry.token_env (repeatable; SLUICE_VM_ENV=\"A=1,B\")")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.VMEnv, err = parseVMEnv(vmEnv.specs, os.LookupEnv); err != nil {
		return o, err
	}
	cl, err := parseClusters(clusters.specs)
	if err != nil {
		return o, err
	}
	o.Clusters = cl
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if o.DemoTraffic < 0 || o.DemoTraffic > 1000 {
		return o, fmt.Errorf("-demo-traffic: %d is out of range; use 0 (off) to 1000 requests per second", o.DemoTraffic)
	}
	if o.VMs < 1 || o.VMs > 64 {
		return o, fmt.Errorf("-vms: %d is out of range; use 1 to 64", o.VMs)
	}
	if o.ReloadInterval <= 0 {
		return o, errors.New("-reload-interval: must be positive, e.g. 1s")
	}
	if err := checkXDSOptions(o); err != nil {
		return o, err
	}
	return o, nil
}

func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envInt(name string, def int) (int, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a whole number", name, v)
	}
	return n, nil
}
