package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/pggcra"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// postgresCleanEvery is how often the rows of full buckets are deleted.
const postgresCleanEvery = 10 * time.Second

// postgresFlags declares the PostgreSQL backend's flags; the returned
// string is -postgres-timeout's value, checked by parsePostgres.
func (o *options) postgresFlags(fs *flag.FlagSet) *string {
	fs.StringVar(&o.PostgresURL, "postgres-url", env("SLUICE_POSTGRES_URL", ""), "PostgreSQL for fleet mode instead of Redis: a connection string, postgres://user@host:5432/db?sslmode=require;\n"+
		"a password is better in PGPASSWORD or ~/.pgpass (or this variable) than on the command line (SLUICE_POSTGRES_URL)")
	timeout := env("SLUICE_POSTGRES_TIMEOUT", fleet.DefaultTimeout.String())
	fs.Func("postgres-timeout", "PostgreSQL budget of one rate limit call; past it the call answers UNAVAILABLE (default "+fleet.DefaultTimeout.String()+") (SLUICE_POSTGRES_TIMEOUT)", func(v string) error {
		timeout = v
		return nil
	})
	return &timeout
}

// parsePostgres checks the PostgreSQL flags: with -rls-listen, exactly one
// backend.
func (o *options) parsePostgres(timeout string) error {
	if timeout == "" {
		timeout = fleet.DefaultTimeout.String()
	}
	d, err := time.ParseDuration(timeout)
	if err != nil || d < time.Millisecond || d > 10*time.Second {
		return fmt.Errorf("-postgres-timeout: %q is not a duration between 1ms and 10s (e.g. 100ms)", timeout)
	}
	o.PostgresTimeout = d
	switch {
	case o.PostgresURL == "":
		return nil
	case o.RLSListen == "":
		return errors.New("-postgres-url: set -rls-listen too (fleet mode's rate limit service is the only user of PostgreSQL)")
	case len(o.Redis.Addrs) > 0:
		return errors.New("-postgres-url and -redis-addrs exclude each other: the buckets are in one backend")
	}
	if _, err := pggcra.Config(pggcra.Options{URL: o.PostgresURL}); err != nil {
		return fmt.Errorf("-postgres-url: %w", err)
	}
	return nil
}

// fleetBackend is where the RLS keeps its buckets.
type fleetBackend struct {
	backend  fleet.Backend
	kind     string // fleet.BackendRedis or fleet.BackendPostgres
	name     string // for people, never a password
	timeout  time.Duration
	close    func()
	register func(prometheus.Registerer) error
	start    func(ctx context.Context) // background work, until ctx ends
}

// openFleetBackend connects to the backend the options name. PostgreSQL
// must answer now: the schema is created or checked at start.
func openFleetBackend(ctx context.Context, o options, logger *slog.Logger) (*fleetBackend, error) {
	none := func(prometheus.Registerer) error { return nil }
	if o.PostgresURL == "" {
		redisgcra.SetLogger(logger)
		rc, err := redisgcra.NewClient(o.Redis)
		if err != nil {
			return nil, fmt.Errorf("-redis-addrs: %w", err)
		}
		return &fleetBackend{backend: redisgcra.New(rc), kind: fleet.BackendRedis, name: redisName(o.Redis),
			timeout: o.RedisTimeout, close: func() { rc.Close() }, register: none, start: func(context.Context) {}}, nil
	}
	po := pggcra.Options{URL: o.PostgresURL}
	cfg, err := pggcra.Config(po)
	if err != nil {
		return nil, fmt.Errorf("-postgres-url: %w", err)
	}
	name := pggcra.Name(cfg)
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pg, err := pggcra.Open(octx, po)
	if err != nil {
		return nil, fmt.Errorf("-postgres-url (%s): %w", name, err)
	}
	log := logger.With("component", "rls")
	return &fleetBackend{backend: pg, kind: fleet.BackendPostgres, name: name, timeout: o.PostgresTimeout,
		close: pg.Close, register: pg.Register,
		start: func(ctx context.Context) {
			go pg.CleanEvery(ctx, postgresCleanEvery, func(err error) {
				log.Warn("deleting the rows of full buckets", "err", err)
			})
		}}, nil
}
