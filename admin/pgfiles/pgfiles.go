// Package pgfiles keeps a PostgreSQL connection's files current. pgx reads
// the files a connection string names (sslrootcert, sslcert, sslkey, and
// the password file, passfile or PGPASSFILE) once, when it parses the
// string: a certificate renewed on disk (by cert-manager, say) or a
// password file updated from a Secret would then need a restart, and an
// expired client certificate would fail every new connection until one.
// BeforeConnect reads them again for each new connection.
package pgfiles

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// BeforeConnect returns a hook for pgx's BeforeConnect
// (pgxpool.Config.BeforeConnect, stdlib.OptionBeforeConnect) that gives
// each new connection the TLS configuration and password of the
// connection string parsed again now, by parse. When it no longer parses
// (a file caught half-written), the last configuration that did stays in
// use. Connections already open are not touched.
//
// Parsing costs a few file reads per new connection; pools keep their
// connections, so that is rare.
func BeforeConnect(parse func() (*pgx.ConnConfig, error)) func(context.Context, *pgx.ConnConfig) error {
	var mu sync.Mutex
	var last *pgx.ConnConfig
	return func(_ context.Context, cfg *pgx.ConnConfig) error {
		fresh, err := parse()
		mu.Lock()
		if err == nil {
			last = fresh
		}
		fresh = last
		mu.Unlock()
		if fresh == nil {
			return nil // never parsed here: the configuration pgx was given stands
		}
		// cfg is the pool's copy for this connection: only the fields the
		// files decide change.
		cfg.TLSConfig = fresh.TLSConfig
		cfg.Fallbacks = fresh.Fallbacks
		cfg.Password = fresh.Password
		return nil
	}
}
