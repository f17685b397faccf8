package pgfiles_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/pgfiles"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// query runs SELECT 1 on a new connection of pool.
func query(pool *pgxpool.Pool) error {
	pool.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var one int
	return pool.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func TestNewConnectionsUseTheClientCertificateOnDiskNow(t *testing.T) {
	pg := fleettest.StartPostgresWithClientCerts(t)
	url := pg.TLSURL("&connect_timeout=5")
	open := func(hook bool) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		if hook {
			cfg.BeforeConnect = pgfiles.BeforeConnect(func() (*pgx.ConnConfig, error) { return pgx.ParseConfig(url) })
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	reloading, static := open(true), open(false)
	for name, pool := range map[string]*pgxpool.Pool{"with the hook": reloading, "without": static} {
		if err := query(pool); err != nil {
			t.Fatalf("%s, the first certificate: %v\n%s", name, err, pg.Log())
		}
	}

	// A certificate of a CA the server does not trust: new connections
	// present it and are refused; a pool that read the files once does
	// not notice.
	pg.PutClientCert(t, tlstest.NewCA(t, "not the server's CA"))
	if err := query(reloading); err == nil {
		t.Fatal("a new connection succeeded with a client certificate the server does not trust: the files were not read again")
	}
	if err := query(static); err != nil {
		t.Fatalf("the control pool, files read once, failed: %v", err)
	}
	// A pool made now, while the files hold the untrusted certificate.
	late := open(true)

	// Renewed by the right CA: used from the next connection.
	pg.PutClientCert(t, pg.Server.CA)
	for name, pool := range map[string]*pgxpool.Pool{"the first pool": reloading, "the pool made meanwhile": late} {
		if err := query(pool); err != nil {
			t.Fatalf("%s, after the certificate was renewed on disk: %v", name, err)
		}
	}

	// A key caught half-written: the last configuration that parsed stays
	// (for the late pool, not the untrusted one it was made with).
	if err := os.WriteFile(pg.KeyFile, []byte("-----BEGIN EC PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := query(late); err != nil {
		t.Errorf("a half-written key broke new connections: %v", err)
	}
}

func TestNewConnectionsReadThePasswordFileNow(t *testing.T) {
	passfile := filepath.Join(t.TempDir(), "pgpass")
	url := "postgres://sluice@db.internal:5432/sluice?sslmode=disable&passfile=" + passfile
	hook := pgfiles.BeforeConnect(func() (*pgx.ConnConfig, error) { return pgx.ParseConfig(url) })
	for _, password := range []string{"first", "rotated"} {
		if err := os.WriteFile(passfile, []byte("db.internal:5432:sluice:sluice:"+password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _ := pgx.ParseConfig("postgres://sluice@db.internal:5432/sluice?sslmode=disable")
		if err := hook(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Password != password {
			t.Errorf("password %q, want %q from the file as it is now", cfg.Password, password)
		}
	}
}

// BenchmarkBeforeConnect is what the hook adds to each new connection:
// parsing a connection string that names a CA, a client certificate and
// a key (three files read, the key pair loaded).
//
//	go test ./admin/pgfiles -run '^$' -bench BeforeConnect -count 6
func BenchmarkBeforeConnect(b *testing.B) {
	f := tlstest.WriteFiles(b, "postgres")
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:5432/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s",
		f.CAFile, f.CertFile, f.KeyFile)
	hook := pgfiles.BeforeConnect(func() (*pgx.ConnConfig, error) { return pgx.ParseConfig(url) })
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := hook(context.Background(), cfg.Copy()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewConnectionOverTLS compares a new connection (TLS with a
// client certificate, authentication, one query) made with the
// configuration parsed at start and with the hook's (the two alternate
// with -count): the share of a new connection the hook costs.
//
//	go test ./admin/pgfiles -run '^$' -bench NewConnectionOverTLS -benchtime 300x -count 6
func BenchmarkNewConnectionOverTLS(b *testing.B) {
	url := fleettest.StartPostgresWithClientCerts(b).TLSURL("")
	start, err := pgx.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	hook := pgfiles.BeforeConnect(func() (*pgx.ConnConfig, error) { return pgx.ParseConfig(url) })
	connect := func(b *testing.B, withHook bool) {
		cfg := start.Copy()
		if withHook {
			if err := hook(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
		}
		c, err := pgx.ConnectConfig(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		var one int
		if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
			b.Fatal(err)
		}
		c.Close(context.Background())
	}
	for _, withHook := range []bool{false, true} {
		b.Run(fmt.Sprintf("hook=%v", withHook), func(b *testing.B) {
			for b.Loop() {
				connect(b, withHook)
			}
		})
	}
}
