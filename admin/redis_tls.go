package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/sluice-rl/sluice/admin/tlsfiles"
)

// redisTLSFlags declares the flags of TLS to Redis; the returned function
// checks them once the fleet flags are parsed, and sets o.Redis.TLS.
func (o *options) redisTLSFlags(fs *flag.FlagSet) func() error {
	f := &o.RedisTLS
	fs.BoolVar(&f.On, "redis-tls", envBool("SLUICE_REDIS_TLS"), "connect to Redis (servers and sentinels) over TLS, verifying its certificate against the system's roots or -redis-tls-ca (SLUICE_REDIS_TLS)")
	fs.StringVar(&f.CA, "redis-tls-ca", env("SLUICE_REDIS_TLS_CA", ""), "verify Redis' certificate against this CA (PEM) instead of the system's roots; implies -redis-tls (SLUICE_REDIS_TLS_CA)")
	fs.StringVar(&f.Cert, "redis-tls-cert", env("SLUICE_REDIS_TLS_CERT", ""), "present this client certificate (PEM) to Redis, for tls-auth-clients: mutual TLS; implies -redis-tls (SLUICE_REDIS_TLS_CERT)")
	fs.StringVar(&f.Key, "redis-tls-key", env("SLUICE_REDIS_TLS_KEY", ""), "and this private key (PEM) (SLUICE_REDIS_TLS_KEY)")
	fs.StringVar(&f.ServerName, "redis-tls-server-name", env("SLUICE_REDIS_TLS_SERVER_NAME", ""), "the name Redis' certificate must hold instead of the address dialed (for servers reached by IP); implies -redis-tls (SLUICE_REDIS_TLS_SERVER_NAME)")
	fs.BoolVar(&f.SkipNameCheck, "redis-tls-skip-name-check", envBool("SLUICE_REDIS_TLS_SKIP_NAME_CHECK"), "verify Redis' certificate against -redis-tls-ca but not the name it holds, for services whose certificates name no address (SLUICE_REDIS_TLS_SKIP_NAME_CHECK)")
	return func() error {
		if f.CA != "" || f.Cert != "" || f.Key != "" || f.ServerName != "" || f.SkipNameCheck {
			f.On = true
		}
		switch {
		case !f.On:
			return nil
		case (f.Cert == "") != (f.Key == ""):
			return errors.New("-redis-tls-cert and -redis-tls-key go together")
		case f.SkipNameCheck && f.CA == "":
			return errors.New("-redis-tls-skip-name-check: needs -redis-tls-ca (against the system's roots any public certificate would pass)")
		case f.SkipNameCheck && f.ServerName != "":
			return errors.New("-redis-tls-skip-name-check and -redis-tls-server-name exclude each other")
		case len(o.Redis.Addrs) == 0:
			return errors.New("-redis-tls: set -redis-addrs too (TLS is to the Redis of fleet mode)")
		}
		config, err := f.Client()
		if err != nil {
			return fmt.Errorf("-redis-tls-ca/-redis-tls-cert/-redis-tls-key: %w", err)
		}
		o.Redis.TLS = config
		return nil
	}
}

// redisTLSOptions are the TLS flags for Redis: On, or any file or name
// set, means TLS.
type redisTLSOptions struct {
	On bool
	tlsfiles.ClientFiles
}
