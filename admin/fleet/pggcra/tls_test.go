package pggcra

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// Fleet mode's buckets in a PostgreSQL that requires verified TLS and a
// client certificate: a certificate replaced on disk is what the pool's
// next connection presents.
func TestBucketsOverTLSReadTheCertificateAgain(t *testing.T) {
	server := tlstest.WriteFiles(t, "postgres")
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{TLS: &fleettest.PostgresTLS{
		Cert: server.CertFile, Key: server.KeyFile, CA: server.CAFile, ClientCerts: true}})
	dir := t.TempDir()
	put := func(ca *tlstest.CA) {
		cert, key := ca.Issue(t, "postgres")
		tlstest.Write(t, dir, "tls.crt", cert)
		tlstest.Write(t, dir, "tls.key", key)
	}
	put(server.CA)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s&pool_min_conns=0",
		pg.Port, server.CAFile, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Open(ctx, Options{URL: url})
	if err != nil {
		t.Fatalf("opening over TLS: %v\n%s", err, pg.Log())
	}
	defer b.Close()
	ask := func() error {
		b.pool.Reset() // the next query dials
		var one int
		return b.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
	if err := ask(); err != nil {
		t.Fatal(err)
	}
	put(tlstest.NewCA(t, "not the server's CA"))
	if err := ask(); err == nil {
		t.Fatal("a new connection succeeded with a certificate the server does not trust: the files were not read again")
	}
	put(server.CA)
	if err := ask(); err != nil {
		t.Fatalf("after the certificate was renewed on disk: %v", err)
	}
}
