package pggcra

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// Fleet mode's buckets in a PostgreSQL that requires verified TLS and a
// client certificate: a certificate replaced on disk is what the pool's
// next connection presents.
func TestBucketsOverTLSReadTheCertificateAgain(t *testing.T) {
	pg := fleettest.StartPostgresWithClientCerts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Open(ctx, Options{URL: pg.TLSURL("&pool_min_conns=0")})
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
	pg.PutClientCert(t, tlstest.NewCA(t, "not the server's CA"))
	if err := ask(); err == nil {
		t.Fatal("a new connection succeeded with a certificate the server does not trust: the files were not read again")
	}
	pg.PutClientCert(t, pg.Server.CA)
	if err := ask(); err != nil {
		t.Fatalf("after the certificate was renewed on disk: %v", err)
	}
}
