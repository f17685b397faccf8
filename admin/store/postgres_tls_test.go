package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// The policy store reaches a PostgreSQL that requires verified TLS and a
// client certificate, and a certificate replaced on disk is what its next
// connection presents.
func TestPostgresStoreOverTLSReadsItsCertificateAgain(t *testing.T) {
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
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s",
		pg.Port, server.CAFile, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	ctx := context.Background()
	s, err := OpenPostgres(ctx, url)
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
	put(tlstest.NewCA(t, "not the server's CA"))
	if err := read(); err == nil {
		t.Fatal("a new connection succeeded with a certificate the server does not trust: the files were not read again")
	}
	put(server.CA)
	if err := read(); err != nil {
		t.Fatalf("after the certificate was renewed on disk: %v", err)
	}
}
