package main

import (
	"crypto/tls"
	"io"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

func TestRedisTLSFlags(t *testing.T) {
	for _, k := range []string{"SLUICE_RLS_LISTEN", "SLUICE_REDIS_ADDRS", "SLUICE_REDIS_MASTER", "SLUICE_REDIS_CLUSTER", "SLUICE_POSTGRES_URL",
		"SLUICE_REDIS_TLS", "SLUICE_REDIS_TLS_CA", "SLUICE_REDIS_TLS_CERT", "SLUICE_REDIS_TLS_KEY", "SLUICE_REDIS_TLS_SERVER_NAME"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "redis CA")
	c, k := ca.Issue(t, "sluice")
	caFile, cert, key := tlstest.Write(t, dir, "ca.crt", ca.CertPEM), tlstest.Write(t, dir, "tls.crt", c), tlstest.Write(t, dir, "tls.key", k)
	fleetArgs := []string{"-rls-listen", ":1", "-redis-addrs", "10.0.0.7:6380"}

	o, err := parseOptions(fleetArgs, io.Discard)
	if err != nil || o.Redis.TLS != nil || redisName(o.Redis) != "redis 10.0.0.7:6380" {
		t.Fatalf("without TLS flags: TLS %v, name %q, %v", o.Redis.TLS != nil, redisName(o.Redis), err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"-redis-tls", []string{"-redis-tls"}, nil},
		{"SLUICE_REDIS_TLS", nil, map[string]string{"SLUICE_REDIS_TLS": "true"}},
		{"a CA implies TLS", []string{"-redis-tls-ca", caFile}, nil},
		{"a server name implies TLS", []string{"-redis-tls-server-name", "redis.internal"}, nil},
		{"a CA, the name not checked", []string{"-redis-tls-ca", caFile, "-redis-tls-skip-name-check"}, nil},
		{"mutual TLS from the environment", nil, map[string]string{"SLUICE_REDIS_TLS_CERT": cert, "SLUICE_REDIS_TLS_KEY": key, "SLUICE_REDIS_TLS_CA": caFile}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			o, err := parseOptions(append(append([]string{}, fleetArgs...), c.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.Redis.TLS == nil {
				t.Fatal("TLS to Redis is off")
			}
			cfg, err := o.Redis.TLS()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MinVersion < tls.VersionTLS12 {
				t.Errorf("configuration %+v: want TLS 1.2 or later, verified", cfg)
			}
			if strings.Contains(c.name, "CA") && cfg.RootCAs == nil {
				t.Error("-redis-tls-ca given, no root pool")
			}
			if c.env["SLUICE_REDIS_TLS_CERT"] != "" && len(cfg.Certificates) != 1 {
				t.Error("client certificate given, none presented")
			}
			if skip := strings.Contains(c.name, "not checked"); skip != (cfg.InsecureSkipVerify && cfg.VerifyConnection != nil) {
				t.Errorf("name check skipped %v, want %v (the chain still verified)", cfg.InsecureSkipVerify, skip)
			}
			if c.args != nil && c.args[0] == "-redis-tls-server-name" && cfg.ServerName != "redis.internal" {
				t.Errorf("ServerName %q", cfg.ServerName)
			}
			if name := redisName(o.Redis); name != "redis 10.0.0.7:6380 over TLS" {
				t.Errorf("redisName = %q", name)
			}
		})
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-redis-tls-cert", cert}, "-redis-tls-cert and -redis-tls-key go together"},
		{[]string{"-redis-tls-key", key}, "-redis-tls-cert and -redis-tls-key go together"},
		{[]string{"-redis-tls-ca", dir + "/missing.crt"}, dir + "/missing.crt"},
		{[]string{"-redis-tls-ca", key}, key + ": no PEM certificate"},
		{[]string{"-redis-tls-cert", cert, "-redis-tls-key", cert}, cert},
		{[]string{"-redis-tls-skip-name-check"}, "-redis-tls-skip-name-check: needs -redis-tls-ca"},
		{[]string{"-redis-tls-skip-name-check", "-redis-tls-ca", caFile, "-redis-tls-server-name", "r"}, "exclude each other"},
	} {
		_, err := parseOptions(append(append([]string{}, fleetArgs...), c.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if _, err := parseOptions([]string{"-redis-tls"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-redis-tls: set -redis-addrs") {
		t.Errorf("-redis-tls without Redis: %v", err)
	}
}

// TestAdminServesTheRLSOverRedisTLS: the admin reaches a Redis that
// serves TLS only and requires client certificates.
func TestAdminServesTheRLSOverRedisTLS(t *testing.T) {
	f := tlstest.WriteFiles(t, "redis")
	r := fleettest.StartRedisTLS(t, fleettest.ServerTLS(f, true))
	testAdminRLS(t, []string{"-redis-addrs", r.Addr, "-redis-tls-ca", f.CAFile, "-redis-tls-cert", f.CertFile, "-redis-tls-key", f.KeyFile}, "redis")
}
