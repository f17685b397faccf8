package store

import (
	"context"
	"testing"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// The policy store reaches a PostgreSQL that requires verified TLS and a
// client certificate, and a certificate replaced on disk is what its next
// connection presents.
func TestPostgresStoreOverTLSReadsItsCertificateAgain(t *testing.T) {
	pg := fleettest.StartPostgresWithClientCerts(t)
	ctx := context.Background()
	s, err := OpenPostgres(ctx, pg.TLSURL(""))
	if err != nil {
		t.Fatalf("opening the store over TLS: %v\n%s", err, pg.Log())
	}
	defer s.Close()
	read := func() error {
		s.db.DB.SetMaxIdleConns(0) // the next query dials
		defer s.db.DB.SetMaxIdleConns(2)
		_, err := s.CurrentNumber(ctx)
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	pg.PutClientCert(t, tlstest.NewCA(t, "not the server's CA"))
	if err := read(); err == nil {
		t.Fatal("a new connection succeeded with a certificate the server does not trust: the files were not read again")
	}
	pg.PutClientCert(t, pg.Server.CA)
	if err := read(); err != nil {
		t.Fatalf("after the certificate was renewed on disk: %v", err)
	}
}
