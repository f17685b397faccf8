package redisgcra_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/admin/tlsfiles"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// tlsSetup is a CA and a certificate it issued for 127.0.0.1 and
// localhost (the servers', also valid as a client's), as files.
type tlsSetup struct{ tlstest.Files }

func newTLSSetup(t testing.TB) tlsSetup { return tlsSetup{tlstest.WriteFiles(t, "redis")} }

// servers is how the test's redis-servers are started: TLS only, client
// certificates required or not.
func (s tlsSetup) servers(authClients bool) fleettest.TLS {
	return fleettest.ServerTLS(s.Files, authClients)
}

// client is the Sluice side: a TLS configuration read from files.
func client(t testing.TB, f tlsfiles.ClientFiles) func() (*tls.Config, error) {
	t.Helper()
	c, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// takeOne takes a token of a fresh bucket and returns the error.
func takeOne(b *redisgcra.Buckets, id string) error {
	limit := redisgcra.Limit{Rate: 1, Burst: 10}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	outs, err := b.Run(ctx, []redisgcra.Op{{Key: redisgcra.Key("sluice", "tls", id), Amount: limit.Cost(1), Tau: limit.Tau()}})
	if err == nil && !outs[0].Allowed {
		err = fmt.Errorf("the first take of a fresh bucket was refused: %+v", outs[0])
	}
	return err
}

func TestTLSVerifiesTheServerCertificate(t *testing.T) {
	s := newTLSSetup(t)
	r := fleettest.StartRedisTLS(t, s.servers(false))
	other := newTLSSetup(t)
	for _, c := range []struct {
		name  string
		files tlsfiles.ClientFiles
		want  string // "": the take succeeds
	}{
		{"the CA that issued it", tlsfiles.ClientFiles{CA: s.CAFile}, ""},
		{"a name it holds", tlsfiles.ClientFiles{CA: s.CAFile, ServerName: "localhost"}, ""},
		{"another CA", tlsfiles.ClientFiles{CA: other.CAFile}, "certificate signed by unknown authority"},
		{"the system's roots", tlsfiles.ClientFiles{}, "certificate signed by unknown authority"},
		{"a name it does not hold", tlsfiles.ClientFiles{CA: s.CAFile, ServerName: "redis.example.com"}, "redis.example.com"},
		{"the name not checked", tlsfiles.ClientFiles{CA: s.CAFile, SkipNameCheck: true}, ""},
		{"the name not checked, another CA", tlsfiles.ClientFiles{CA: other.CAFile, SkipNameCheck: true}, "certificate signed by unknown authority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, _ := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}, TLS: client(t, c.files)})
			err := takeOne(b, c.name)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("take over TLS: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("take: %v, want an error saying %q", err, c.want)
			}
		})
	}
	t.Run("plaintext to a TLS port", func(t *testing.T) {
		b, _ := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}, Timeout: 300 * time.Millisecond})
		if err := takeOne(b, "plain"); err == nil {
			t.Fatal("a plaintext take on a TLS-only server succeeded")
		}
	})
}

func TestTLSClientCertificateIsReadAgainWhenItsFilesChange(t *testing.T) {
	s := newTLSSetup(t)
	r := fleettest.StartRedisTLS(t, s.servers(true))

	b, _ := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}, TLS: client(t, tlsfiles.ClientFiles{CA: s.CAFile})})
	if err := takeOne(b, "anonymous"); err == nil {
		t.Fatal("a take without a client certificate succeeded on a server that requires one")
	}

	// A certificate of another CA, then the right one written over the
	// same files: the client in use picks it up at its next connection.
	dir := t.TempDir()
	wrongCert, wrongKey := tlstest.NewCA(t, "not redis' CA").Issue(t, "sluice")
	cert, key := tlstest.Write(t, dir, "client.crt", wrongCert), tlstest.Write(t, dir, "client.key", wrongKey)
	b, _ = newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}, PoolSize: 1,
		TLS: client(t, tlsfiles.ClientFiles{CA: s.CAFile, Cert: cert, Key: key})})
	if err := takeOne(b, "wrong CA"); err == nil {
		t.Fatal("a take with a client certificate of another CA succeeded")
	}
	rightCert, rightKey := s.CA.Issue(t, "sluice")
	tlstest.Write(t, dir, "client.crt", rightCert)
	tlstest.Write(t, dir, "client.key", rightKey)
	if err := takeOne(b, "rotated"); err != nil {
		t.Fatalf("after the files were replaced by a certificate of Redis' CA: %v", err)
	}
}

func TestTLSOnACluster(t *testing.T) {
	s := newTLSSetup(t)
	addrs := fleettest.StartClusterTLS(t, s.servers(true))
	b, _ := newBuckets(t, redisgcra.ClientOptions{Addrs: addrs,
		TLS: client(t, tlsfiles.ClientFiles{CA: s.CAFile, Cert: s.CertFile, Key: s.KeyFile})})
	// Keys on every shard, in one call: the client reaches every node
	// the cluster announces, over TLS.
	var keys []string
	for i := range 6 {
		keys = append(keys, redisgcra.Key("sluice", "global", fmt.Sprint("id-", i)))
	}
	fleettest.Hammer(t, b.Run, keys, 4)
	if err := b.Ping(context.Background()); err != nil {
		t.Errorf("Ping every shard: %v", err)
	}
}

func TestTLSThroughSentinel(t *testing.T) {
	s := newTLSSetup(t)
	r := fleettest.StartRedisTLS(t, s.servers(false))
	sentinel := fleettest.StartSentinelTLS(t, r.Addr, "mymaster", s.servers(false))
	b, _ := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{sentinel}, MasterName: "mymaster",
		TLS: client(t, tlsfiles.ClientFiles{CA: s.CAFile})})
	if err := takeOne(b, "sentinel"); err != nil {
		t.Fatalf("take through a TLS sentinel: %v", err)
	}
	if err := b.Ping(context.Background()); err != nil {
		t.Error(err)
	}
}
