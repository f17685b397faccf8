// Command ratelimit-admin is Sluice's admin server: it stores every policy
// version in SQLite (in -data-dir), validates changes with the filter's own
// parser, serves the dashboard and the JSON API on -listen, and pushes the
// current policy to every Envoy (and development gateway) over xDS/ECDS on
// -xds-listen.
//
//	ratelimit-admin -data-dir ./data
//	ratelimit-admin -token "$(cat token)" -listen 0.0.0.0:9000 -tls-cert c.pem -tls-key k.pem
//	ratelimit-admin -data-dir ./data -new-token      # replace the admin token, print it, exit
//	ratelimit-admin -metrics-listen 10.0.0.5:9090    # Prometheus on an internal port, no token
//	ratelimit-admin -rls-listen 10.0.0.5:18081 -redis-addrs 10.0.0.7:6379   # fleet mode (global rules)
//	ratelimit-admin policy validate|diff|apply|export|test ...   # GitOps client of a running admin, policy tests (docs/kubernetes.md, docs/policy-tests.md)
//	SLUICE_POSTGRES_URL=postgres://sluice@10.0.0.8/sluice ratelimit-admin -rls-listen 10.0.0.5:18081
//
// With -rls-listen the admin also serves Envoy's rate limit service API
// (gRPC) for the plugins' global rules, with the buckets in Redis
// (-redis-addrs; password in SLUICE_REDIS_PASSWORD) or in PostgreSQL
// (-postgres-url). See docs/fleet.md.
//
// The plugins POST their telemetry reports to /api/v1/telemetry with the
// telemetry token (-telemetry-token, or generated at first start and
// printed once); the dashboard (/dashboard) and /metrics show them.
//
// Every flag can also be set from the environment (SLUICE_ADMIN_LISTEN,
// ...). See docs/admin.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/envoygateway"
	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/admin/gitops"
	"github.com/sluice-rl/sluice/admin/httpapi"
	"github.com/sluice-rl/sluice/admin/istio"
	"github.com/sluice-rl/sluice/admin/migrate"
	"github.com/sluice-rl/sluice/admin/notify"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/admin/tlsfiles"
	"github.com/sluice-rl/sluice/admin/trial"
	"github.com/sluice-rl/sluice/admin/xds"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "policy" {
		os.Exit(gitops.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "migrate" {
		os.Exit(migrate.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit-admin:", err)
		os.Exit(1)
	}
}

type options struct {
	Listen        string
	XDSListen     string
	DataDir       string
	Database      string
	Token         string
	NewToken      bool
	WasmPath      string
	TLSCert       string
	TLSKey        string
	SecureCookies bool
	Istio         istio.Options
	EnvoyGateway  envoygateway.Options
	IstioSelector string
	IstioTarget   string
	LogLevel      string
	InitialPolicy string
	InitialTests  string
	RequireReview bool
	ReviewOnly    string            // -review-policies
	PolicyFile    policyFileOptions // policy_file.go

	TelemetryToken    string
	TelemetryTokenEnv string
	TelemetryMaxBytes int64
	MetricsListen     string

	RLSListen    string
	Redis        redisgcra.ClientOptions
	RedisAddrs   string
	RedisTimeout time.Duration
	RedisTLS     redisTLSOptions

	PostgresURL     string
	PostgresTimeout time.Duration

	AuditRetention time.Duration
	TrustedProxies []netip.Prefix

	OIDC    oidcOptions
	Notify  notify.Options
	GRPCTLS tlsfiles.Files
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("ratelimit-admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.Listen, "listen", env("SLUICE_ADMIN_LISTEN", "127.0.0.1:9000"), "HTTP address of the dashboard and API (SLUICE_ADMIN_LISTEN)")
	fs.StringVar(&o.XDSListen, "xds-listen", env("SLUICE_XDS_LISTEN", "127.0.0.1:18000"), `gRPC address of the xDS (ADS + ECDS) server; "off" disables it (SLUICE_XDS_LISTEN)`)
	fs.StringVar(&o.DataDir, "data-dir", env("SLUICE_DATA_DIR", "./data"), "directory of the SQLite database (SLUICE_DATA_DIR)")
	fs.StringVar(&o.Database, "database", env("SLUICE_DATABASE", ""), "PostgreSQL URL (postgres://user@host/db) for replicated admins sharing one database; empty: SQLite in -data-dir. The password is best given in PGPASSWORD or ~/.pgpass (SLUICE_DATABASE)")
	fs.StringVar(&o.Token, "token", env("SLUICE_ADMIN_TOKEN", ""), "admin token, at least 16 characters; empty: use the stored one, or generate one at first start and print it once (SLUICE_ADMIN_TOKEN)")
	fs.BoolVar(&o.NewToken, "new-token", false, "replace the stored admin token with a new one, end every session, print the token and exit")
	fs.StringVar(&o.WasmPath, "wasm-path", env("SLUICE_WASM_PATH", "bin/ratelimit.wasm"), "the plugin file as Envoy sees it, pushed in the ECDS config; made absolute (SLUICE_WASM_PATH)")
	fs.StringVar(&o.TLSCert, "tls-cert", env("SLUICE_ADMIN_TLS_CERT", ""), "serve HTTPS with this certificate (PEM; read again when the file changes) (SLUICE_ADMIN_TLS_CERT)")
	fs.StringVar(&o.TLSKey, "tls-key", env("SLUICE_ADMIN_TLS_KEY", ""), "and this private key (PEM) (SLUICE_ADMIN_TLS_KEY)")
	fs.BoolVar(&o.SecureCookies, "secure-cookies", envBool("SLUICE_ADMIN_SECURE_COOKIES"), "mark cookies Secure even over plain HTTP (behind a TLS-terminating proxy) (SLUICE_ADMIN_SECURE_COOKIES)")
	fs.StringVar(&o.Istio.URL, "istio-url", env("SLUICE_ISTIO_URL", istio.DefaultURL), "module URL in the Istio WasmPlugin: oci://, file://, http(s):// (SLUICE_ISTIO_URL)")
	fs.StringVar(&o.Istio.SHA256, "istio-sha256", env("SLUICE_ISTIO_SHA256", ""), "optional SHA-256 of the module for the WasmPlugin (SLUICE_ISTIO_SHA256)")
	fs.StringVar(&o.Istio.Name, "istio-name", env("SLUICE_ISTIO_NAME", istio.DefaultName), "metadata.name of the WasmPlugin (SLUICE_ISTIO_NAME)")
	fs.StringVar(&o.Istio.Namespace, "istio-namespace", env("SLUICE_ISTIO_NAMESPACE", istio.DefaultNamespace), "metadata.namespace of the WasmPlugin; the root namespace applies mesh-wide (SLUICE_ISTIO_NAMESPACE)")
	egFlags(fs, &o.EnvoyGateway)
	fs.StringVar(&o.Istio.GOGC, "istio-gogc", env("SLUICE_ISTIO_GOGC", istio.DefaultGOGC), "GOGC of the plugin VM in the WasmPlugin: a percentage or off (SLUICE_ISTIO_GOGC)")
	fs.StringVar(&o.IstioSelector, "istio-selector", env("SLUICE_ISTIO_SELECTOR", ""), "workload labels for the WasmPlugin, e.g. istio=ingressgateway (SLUICE_ISTIO_SELECTOR)")
	fs.StringVar(&o.IstioTarget, "istio-target", env("SLUICE_ISTIO_TARGET", ""), "targetRefs of the WasmPlugin instead of a selector: Gateway/<name>, GatewayClass/<name>, Service/<name> or ServiceEntry/<name>, comma-separated (SLUICE_ISTIO_TARGET)")
	fs.StringVar(&o.InitialPolicy, "initial-policy", env("SLUICE_INITIAL_POLICY", ""), "policy file stored as version 1 when the database is empty (default: a shadow-mode per-IP limit) (SLUICE_INITIAL_POLICY)")
	fs.BoolVar(&o.RequireReview, "require-review", envBool("SLUICE_REQUIRE_REVIEW"), "every save of the policy waits for another person's approval on the Changes page (a rollback never does) (SLUICE_REQUIRE_REVIEW)")
	fs.StringVar(&o.ReviewOnly, "review-policies", env("SLUICE_REVIEW_POLICIES", ""), "with -require-review, only saves that change these policies (names and prefixes ending in *, comma-separated) or a top-level setting wait for review (SLUICE_REVIEW_POLICIES)")
	fs.StringVar(&o.InitialTests, "initial-tests", env("SLUICE_INITIAL_TESTS", ""), "policy tests file saved as the first tests when none were ever saved; every save must pass them (SLUICE_INITIAL_TESTS)")
	o.PolicyFile.register(fs)
	fs.StringVar(&o.LogLevel, "log-level", env("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (SLUICE_LOG_LEVEL)")
	fs.StringVar(&o.TelemetryToken, "telemetry-token", env("SLUICE_TELEMETRY_TOKEN", ""), "token the plugins send with their telemetry reports, at least 16 characters; empty: the stored one, or generate one at first start and print it once (SLUICE_TELEMETRY_TOKEN)")
	fs.StringVar(&o.TelemetryTokenEnv, "telemetry-token-env", env("SLUICE_TELEMETRY_TOKEN_ENV", DefaultTokenEnv), "VM environment variable for policies with telemetry.token_env: pushed over ECDS with the token when -telemetry-token is set,\n"+
		`else passed from Envoy's own environment; also in the Istio WasmPlugin's vmConfig.env; "off": none (SLUICE_TELEMETRY_TOKEN_ENV)`)
	fs.StringVar(&o.MetricsListen, "metrics-listen", env("SLUICE_METRICS_LISTEN", ""), `address serving Prometheus /metrics without authentication; empty: /metrics on -listen behind the admin token; "off": no metrics (SLUICE_METRICS_LISTEN)`)
	fs.StringVar(&o.RLSListen, "rls-listen", env("SLUICE_RLS_LISTEN", ""), "gRPC address of the rate limit service for global rules (fleet mode); empty: off (SLUICE_RLS_LISTEN)")
	fs.StringVar(&o.RedisAddrs, "redis-addrs", env("SLUICE_REDIS_ADDRS", ""), "Redis for fleet mode: one address (standalone), several (cluster seeds) or the sentinels' with -redis-master; comma-separated (SLUICE_REDIS_ADDRS)")
	fs.StringVar(&o.Redis.MasterName, "redis-master", env("SLUICE_REDIS_MASTER", ""), "Sentinel master name: -redis-addrs are sentinels (SLUICE_REDIS_MASTER)")
	fs.BoolVar(&o.Redis.Cluster, "redis-cluster", envBool("SLUICE_REDIS_CLUSTER"), "Redis Cluster even with one -redis-addrs seed (SLUICE_REDIS_CLUSTER)")
	fs.StringVar(&o.Redis.Username, "redis-username", env("SLUICE_REDIS_USERNAME", ""), "Redis ACL user; the password is read from SLUICE_REDIS_PASSWORD only (SLUICE_REDIS_USERNAME)")
	redisTimeout := env("SLUICE_REDIS_TIMEOUT", fleet.DefaultTimeout.String())
	fs.Func("redis-timeout", "Redis budget of one rate limit call; past it the call answers UNAVAILABLE (default "+fleet.DefaultTimeout.String()+") (SLUICE_REDIS_TIMEOUT)", func(v string) error {
		redisTimeout = v
		return nil
	})
	telemetryMax := env("SLUICE_TELEMETRY_MAX_BYTES", "64MiB")
	fs.Func("telemetry-max-bytes", "memory budget of the telemetry state (nodes, VMs, rules, series; bucket states apart), e.g. 64MiB, 1GiB; past it new nodes, VMs and rules are refused (default 64MiB) (SLUICE_TELEMETRY_MAX_BYTES)", func(v string) error {
		telemetryMax = v
		return nil
	})
	postgresTimeout := o.postgresFlags(fs)
	accountFlags := o.accountFlags(fs)
	oidcFlags := o.oidcFlags(fs)
	notifyFlags := o.notifyFlags(fs)
	grpcTLSFlags := o.grpcTLSFlags(fs)
	redisTLSFlags := o.redisTLSFlags(fs)
	redisPasswordFlags := o.redisPasswordFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := accountFlags(); err != nil {
		return o, err
	}
	if err := oidcFlags(); err != nil {
		return o, err
	}
	if err := notifyFlags(); err != nil {
		return o, err
	}
	if err := grpcTLSFlags(); err != nil {
		return o, err
	}
	maxBytes, err := parseTelemetryMax(telemetryMax)
	if err != nil {
		return o, err
	}
	o.TelemetryMaxBytes = maxBytes
	if err := o.parseFleet(redisTimeout); err != nil {
		return o, err
	}
	if err := redisTLSFlags(); err != nil {
		return o, err
	}
	if err := redisPasswordFlags(); err != nil {
		return o, err
	}
	if err := o.parsePostgres(*postgresTimeout); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if o.Database != "" && !store.IsPostgresURL(o.Database) {
		return o, errors.New("-database: give a postgres:// URL, or nothing for SQLite in -data-dir")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return o, errors.New("-tls-cert and -tls-key go together")
	}
	if o.Token != "" {
		if err := auth.CheckTokenStrength(o.Token); err != nil {
			return o, fmt.Errorf("-token: %w", err)
		}
	}
	if o.TelemetryToken != "" {
		if err := telemetry.CheckTokenStrength(o.TelemetryToken); err != nil {
			return o, fmt.Errorf("-telemetry-token: %w", err)
		}
		if o.TelemetryToken == o.Token {
			return o, errors.New("-telemetry-token: must differ from the admin token (every Envoy holds it)")
		}
	}
	if err := checkTokenEnv(o.TelemetryTokenEnv); err != nil {
		return o, err
	}
	if o.TelemetryTokenEnv != "off" {
		o.Istio.TokenEnv = o.TelemetryTokenEnv
		o.EnvoyGateway.TokenEnv = o.TelemetryTokenEnv
	}
	if _, err := envoygateway.Render([]byte("{}"), 0, o.EnvoyGateway); err != nil {
		return o, fmt.Errorf("-eg-* flags: %w", err)
	}
	sel, err := istio.ParseSelector(o.IstioSelector)
	if err != nil {
		return o, fmt.Errorf("-istio-selector: %w", err)
	}
	o.Istio.Selector = sel
	if o.Istio.Targets, err = istio.ParseTargets(o.IstioTarget); err != nil {
		return o, fmt.Errorf("-istio-target: %w", err)
	}
	if _, err := istio.Render([]byte("{}"), 0, o.Istio); err != nil {
		return o, fmt.Errorf("-istio-* flags: %w", err)
	}
	if err := o.PolicyFile.check(o.InitialPolicy, o.InitialTests); err != nil {
		return o, err
	}
	if o.ReviewOnly != "" && !o.RequireReview {
		return o, errors.New("-review-policies needs -require-review")
	}
	if _, err := policies.ParseScope(o.ReviewOnly); err != nil {
		return o, fmt.Errorf("-review-policies: %w", err)
	}
	if o.WasmPath == "" {
		return o, errors.New("-wasm-path: empty")
	}
	if o.WasmPath, err = filepath.Abs(o.WasmPath); err != nil {
		return o, fmt.Errorf("-wasm-path: %w", err)
	}
	return o, nil
}

// parseTelemetryMax reads -telemetry-max-bytes: a size with an optional
// unit (64MiB, 500MB, 1GiB), at least 1 MiB.
func parseTelemetryMax(v string) (int64, error) {
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return 0, fmt.Errorf("-telemetry-max-bytes: %q is not a size (e.g. 64MiB, 1GiB)", v)
	}
	if n < 1<<20 || n > 1<<40 {
		return 0, fmt.Errorf("-telemetry-max-bytes: %s is out of range; give 1MiB to 1TiB", v)
	}
	return int64(n), nil
}

// parseFleet checks the fleet-mode flags: the RLS and Redis go together.
func (o *options) parseFleet(timeout string) error {
	o.Redis.Addrs = redisgcra.ParseAddrs(o.RedisAddrs)
	o.Redis.Password = os.Getenv("SLUICE_REDIS_PASSWORD")
	if timeout == "" {
		timeout = fleet.DefaultTimeout.String()
	}
	d, err := time.ParseDuration(timeout)
	if err != nil || d < time.Millisecond || d > 10*time.Second {
		return fmt.Errorf("-redis-timeout: %q is not a duration between 1ms and 10s (e.g. 100ms)", timeout)
	}
	o.RedisTimeout, o.Redis.Timeout = d, d
	switch {
	case o.RLSListen == "" && (len(o.Redis.Addrs) > 0 || o.Redis.MasterName != ""):
		return errors.New("-redis-addrs: set -rls-listen too (fleet mode's rate limit service is the only user of Redis)")
	case o.RLSListen != "" && len(o.Redis.Addrs) == 0 && o.PostgresURL == "":
		return errors.New("-rls-listen: needs -redis-addrs or -postgres-url (where the global rules' buckets are)")
	case o.Redis.MasterName != "" && o.Redis.Cluster:
		return errors.New("-redis-master and -redis-cluster exclude each other")
	}
	return nil
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envBool(name string) bool {
	switch strings.ToLower(os.Getenv(name)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %q is not debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	logger, err := newLogger(o.LogLevel, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := store.OpenDatabase(ctx, o.Database, o.DataDir)
	if err != nil {
		return err
	}
	defer st.Close()

	if o.NewToken {
		tok, err := auth.Rotate(ctx, st)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "New admin token (every session was ended; it is stored hashed and will not be shown again):\n\n    %s\n\n", tok)
		return nil
	}
	authn, generated, err := auth.Setup(ctx, st, o.Token)
	if err != nil {
		return err
	}
	if generated != "" {
		fmt.Fprintf(stdout, "Generated the admin token. It is stored hashed in %s and will NOT be shown again:\n\n    %s\n\n"+
			"Log in with it on the dashboard, or send it as \"Authorization: Bearer <token>\" to the API.\n"+
			"Lost it? Run ratelimit-admin -new-token with the same -database or -data-dir\n\n", st.Path(), generated)
	}

	grpcOpts, err := o.grpcServerOptions()
	if err != nil {
		return err
	}
	if grpcOpts != nil {
		logger.Info("xDS and the rate limit service over TLS", "client_certificates_required", o.GRPCTLS.ClientCA != "")
	}
	// xDS: the one place where the admin meets admin/xds.
	var (
		pub       policies.Publisher
		nodes     httpapi.NodeLister
		xdsServer *xds.Server
	)
	// Telemetry: the version index learns every published version, so a
	// node's config_hash names its policy version; the xDS server tells it
	// the bytes it pushes (resets added) and the version they carry.
	versions := telemetry.NewVersionIndex(nil, logger)
	if o.XDSListen != "off" {
		xdsServer = xds.NewServer(logger, xds.Options{WasmPath: o.WasmPath, VMEnv: vmEnv(o.TelemetryTokenEnv, o.TelemetryToken),
			GRPCOptions: grpcOpts, Pushed: versions.Add})
		pub, nodes = xdsServer, xdsNodes{xdsServer}
	}

	// Fleet mode: the RLS follows the current policy's global rules.
	var (
		fleetSrv *fleet.Server
		fb       *fleetBackend
	)
	if o.RLSListen != "" {
		if fb, err = openFleetBackend(ctx, o, logger); err != nil {
			return err
		}
		defer fb.close()
		rules := &fleet.PolicyRules{}
		pub = rules.Publisher(pub)
		fleetSrv = fleet.NewServer(fleet.Options{Backend: fb.backend, Rules: rules, Timeout: fb.timeout,
			Metrics: fleet.NewMetricsFor(fb.kind), Logger: logger.With("component", "rls"), BackendName: fb.name, GRPCOptions: grpcOpts})
	}

	telTokens, telGenerated, err := telemetry.SetupTokens(ctx, st, o.TelemetryToken)
	if err != nil {
		return fmt.Errorf("telemetry token: %w", err)
	}
	if telGenerated != "" {
		where := "Put it in every Envoy's environment as " + o.TelemetryTokenEnv + ` (the policy says "telemetry": {"token_env": "` + o.TelemetryTokenEnv + `"})`
		if o.TelemetryTokenEnv == "off" {
			where = "Put it in the VM environment variable your policy's telemetry.token_env names"
		}
		fmt.Fprintf(stdout, "Generated the telemetry token (the plugins send it with their reports). It is stored hashed and will NOT be shown again:\n\n    %s\n\n"+
			"%s; see docs/telemetry.md. Lost it? Rotate it on the Telemetry page.\n\n", telGenerated, where)
	}

	// Trials: the xDS server pushes the current version plus a trial's
	// shadow rules without storing a version; a version saved during a
	// trial is pushed with the trial's rules again (trials.Publisher).
	var (
		trials     *trial.Service
		trialsHTTP httpapi.Trials
		svcPub     = versions.Publisher(pub)
	)
	if xdsServer != nil {
		trials = trial.NewService(nil, xdsServer, nil) // its policy service is created next; Pushed indexes its configurations
		svcPub = trials.Publisher(svcPub)
		trialsHTTP = trials
	}
	svc := policies.New(st, svcPub, logger)
	svc.SetReviewRequired(o.RequireReview)
	reviewOnly, _ := policies.ParseScope(o.ReviewOnly) // checked by parseOptions
	svc.SetReviewPolicies(reviewOnly)
	if trials != nil {
		trials.SetPolicies(svc)
	}
	if xdsServer != nil {
		svc.SetResetPublisher(xdsServer) // resets go out in every push
	}
	if fleetSrv != nil {
		svc.SetFleetForgetter(fleetSrv) // a global rule's reset clears the rate limit service's state
	}
	versions.SetSource(svc)
	if err := versions.Load(ctx); err != nil {
		return fmt.Errorf("indexing policy versions: %w", err)
	}
	telState := telemetry.NewState(telemetry.Options{Versions: versions, MaxBytes: o.TelemetryMaxBytes, Logger: logger})
	metrics := telemetry.NewMetrics(telState)
	if fleetSrv != nil {
		if err := fleetSrv.Metrics().Register(metrics.Registry(), fleetSrv); err != nil {
			return fmt.Errorf("fleet metrics: %w", err)
		}
		if err := fb.register(metrics.Registry()); err != nil {
			return fmt.Errorf("fleet metrics: %w", err)
		}
	}
	if xdsServer != nil {
		if err := metrics.Registry().Register(xdsServer.Collector()); err != nil {
			return fmt.Errorf("xds metrics: %w", err)
		}
	}
	streamsCtx, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	telCfg := &httpapi.Telemetry{State: telState, Tokens: telTokens, Metrics: metrics, Done: streamsCtx.Done()}
	if o.TelemetryTokenEnv != "off" {
		telCfg.TokenEnv = o.TelemetryTokenEnv
	}
	var metricsLis net.Listener
	switch o.MetricsListen {
	case "off":
	case "":
		telCfg.MetricsHandler, telCfg.MetricsURL = metrics.Handler(), "/metrics"
	default:
		if metricsLis, err = net.Listen("tcp", o.MetricsListen); err != nil {
			return fmt.Errorf("-metrics-listen: %w", err)
		}
		defer metricsLis.Close()
		telCfg.MetricsURL = "http://" + metricsLis.Addr().String() + "/metrics"
	}
	if o.InitialPolicy != "" {
		initial, err := os.ReadFile(o.InitialPolicy)
		if err != nil {
			return fmt.Errorf("-initial-policy: %w", err)
		}
		svc.SetInitialConfig(initial)
	}
	if _, err := svc.SyncResets(ctx); err != nil { // so that the first push carries them
		return fmt.Errorf("reading the resets: %w", err)
	}
	cur, err := svc.Start(ctx)
	if err != nil {
		return err
	}
	if err := seedTests(ctx, svc, o.InitialTests, logger); err != nil {
		return err
	}
	throttle := auth.NewThrottle(auth.DefaultThrottle)
	if err := throttle.Register(metrics.Registry()); err != nil {
		return fmt.Errorf("auth metrics: %w", err)
	}
	pruneCtx, endPrune := context.WithCancel(ctx)
	defer endPrune() // before the store closes
	go pruneAudit(pruneCtx, st, o.AuditRetention, logger)
	// Other admin processes on the same database (replicas, or a shared
	// data directory) may save too: push their versions as well.
	go svc.Follow(ctx, policies.FollowEvery)
	hook, err := o.startNotify(ctx, logger, metrics.Registry())
	if err != nil {
		return err
	}
	var audit httpapi.AuditLog = st
	if hook != nil {
		audit = notify.Log{AuditLog: st, Hook: hook}
	}
	if err := o.PolicyFile.follow(ctx, svc, audit, metrics.Registry(), logger); err != nil {
		return err
	}
	if cur, err = svc.Current(ctx); err != nil { // the file's version, if it brought one
		return err
	}
	hcfg := httpapi.Config{
		Policies: svc, Auth: authn, Nodes: nodes, Istio: o.Istio, EnvoyGateway: o.EnvoyGateway, Logger: logger, SecureCookies: o.SecureCookies,
		Telemetry: telCfg, Audit: audit, Throttle: throttle, TrustedProxies: o.TrustedProxies, Trials: trialsHTTP,
	}
	if fleetSrv != nil {
		hcfg.Fleet = fleetSrv
	}
	hcfg.Exported = exportedWithResets(svc, logger)
	if hcfg.OIDC, err = o.OIDC.build(ctx); err != nil {
		return err
	} else if hcfg.OIDC != nil {
		logger.Info("OIDC login on", "issuer", o.OIDC.Issuer, "create_users", o.OIDC.CreateUsers)
	}
	handler, err := httpapi.New(hcfg)
	if err != nil {
		return err
	}

	httpLis, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	scheme := "http"
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if o.TLSCert != "" {
		// Read again when the files change: a renewed certificate is
		// served from the next handshake, without a restart.
		cfg, err := tlsfiles.Files{Cert: o.TLSCert, Key: o.TLSKey}.Config()
		if err != nil {
			httpLis.Close()
			return fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		srv.TLSConfig = cfg
		httpLis = tls.NewListener(httpLis, srv.TLSConfig)
		scheme = "https"
	}

	srv.RegisterOnShutdown(endStreams) // the dashboard's event streams end at once

	errc := make(chan error, 4)
	go func() {
		if err := srv.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	var metricsSrv *http.Server
	if metricsLis != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
		go func() {
			if err := metricsSrv.Serve(metricsLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	xdsAddr := "off"
	xdsDone := make(chan struct{})
	if xdsServer == nil {
		close(xdsDone)
	} else {
		xdsLis, err := net.Listen("tcp", o.XDSListen)
		if err != nil {
			srv.Close()
			return fmt.Errorf("-xds-listen: %w", err)
		}
		xdsAddr = xdsLis.Addr().String()
		go func() {
			defer close(xdsDone)
			if err := xdsServer.Serve(ctx, xdsLis); err != nil {
				errc <- err
			}
		}()
	}
	rlsDone := make(chan struct{})
	if fleetSrv == nil {
		close(rlsDone)
	} else {
		rlsLis, err := net.Listen("tcp", o.RLSListen)
		if err != nil {
			srv.Close()
			return fmt.Errorf("-rls-listen: %w", err)
		}
		go func() {
			defer close(rlsDone)
			if err := fleetSrv.Serve(ctx, rlsLis, 5*time.Second); err != nil {
				errc <- fmt.Errorf("rls: %w", err)
			}
		}()
		fb.start(ctx)
		fmt.Fprintf(stdout, "sluice admin: rate limit service (fleet mode) grpc://%s  backend %s\n", rlsLis.Addr(), fb.name)
	}
	fmt.Fprintf(stdout, "sluice admin: dashboard %s://%s/  xDS %s  policy v%d  data %s\n", scheme, httpLis.Addr(), xdsAddr, cur.Number, st.Path())
	metricsText := "off"
	switch {
	case metricsLis != nil:
		metricsText = telCfg.MetricsURL + " (no token)"
	case telCfg.MetricsHandler != nil:
		metricsText = fmt.Sprintf("%s://%s/metrics (admin token)", scheme, httpLis.Addr())
	}
	fmt.Fprintf(stdout, "sluice admin: telemetry POST %s://%s/api/v1/telemetry (token %s)  metrics %s\n", scheme, httpLis.Addr(), telTokens.Info().Hint, metricsText)
	logger.Info("admin started", "http", httpLis.Addr().String(), "xds", xdsAddr, "policy_version", cur.Number, "wasm_path", o.WasmPath)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		stop()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("HTTP shutdown", "err", err)
	}
	if metricsSrv != nil {
		metricsSrv.Shutdown(shutdownCtx)
	}
	for _, done := range []chan struct{}{xdsDone, rlsDone} {
		select {
		case <-done:
		case <-shutdownCtx.Done():
		}
	}
	logger.Info("admin stopped")
	return runErr
}

// redisName describes the Redis deployment for people (never the password).
func redisName(o redisgcra.ClientOptions) string {
	addrs := strings.Join(o.Addrs, ",")
	switch {
	case o.MasterName != "":
		return "redis sentinel master " + o.MasterName + " via " + addrs + over(o)
	case o.Cluster || len(o.Addrs) > 1:
		return "redis cluster " + addrs + over(o)
	}
	return "redis " + addrs + over(o)
}

// over says how the admin reaches Redis when it is not plaintext.
func over(o redisgcra.ClientOptions) string {
	if o.TLS != nil {
		return " over TLS"
	}
	return ""
}

// xdsNodes adapts the xDS server's node list to httpapi.NodeLister: the two
// NodeStatus types have the same fields, so each converts directly (xds
// does not import the HTTP API).
type xdsNodes struct{ s *xds.Server }

// Serving is the resource version pushed now (httpapi.ServingVersion).
func (a xdsNodes) Serving() string { return a.s.Serving() }

func (a xdsNodes) Nodes() []httpapi.NodeStatus {
	ns := a.s.Nodes()
	out := make([]httpapi.NodeStatus, len(ns))
	for i, n := range ns {
		out[i] = httpapi.NodeStatus(n)
	}
	return out
}

// seedTests saves the -initial-tests file as the first tests. A file that
// cannot be read or has mistakes stops the admin; tests the current
// version fails are logged and not saved (they describe another policy).
func seedTests(ctx context.Context, svc *policies.Service, file string, logger *slog.Logger) error {
	if file == "" {
		return nil
	}
	body, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("-initial-tests: %w", err)
	}
	saved, err := svc.SeedTests(ctx, string(body))
	var tf *policies.TestsFailedError
	switch {
	case errors.As(err, &tf):
		logger.Error("-initial-tests: not saved", "err", err, "report", tf.Report.Text(false))
	case err != nil:
		return fmt.Errorf("-initial-tests %s: %w", file, err)
	case saved:
		logger.Info("saved the initial policy tests", "file", file)
	}
	return nil
}
