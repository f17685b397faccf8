package tlsfiles

import (
	"crypto/tls"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// handshake connects to lis as a client with cfg and returns the server
// certificate's common name, or the error.
func handshake(lis net.Listener, cfg *tls.Config) (string, error) {
	conn, err := tls.Dial("tcp", lis.Addr().String(), cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.Handshake(); err != nil {
		return "", err
	}
	// With TLS 1.3 a refused client certificate shows at the first read.
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "timeout") {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// serve accepts TLS connections with cfg and answers each with one byte.
func serve(t *testing.T, cfg *tls.Config) net.Listener {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if tc, ok := c.(*tls.Conn); ok && tc.Handshake() == nil {
					c.Write([]byte{1})
				}
			}()
		}
	}()
	return lis
}

func TestARotatedCertificateIsServedFromTheNextHandshake(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	c1, k1 := ca.Issue(t, "first")
	f := Files{Cert: tlstest.Write(t, dir, "tls.crt", c1), Key: tlstest.Write(t, dir, "tls.key", k1)}
	cfg, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	lis := serve(t, cfg)
	client := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}
	if cn, err := handshake(lis, client); err != nil || cn != "first" {
		t.Fatalf("first handshake: %q %v", cn, err)
	}
	c2, k2 := ca.Issue(t, "second")
	later := time.Now().Add(time.Minute) // a distinct modification time
	for p, data := range map[string][]byte{f.Cert: c2, f.Key: k2} {
		os.WriteFile(p, data, 0o600)
		os.Chtimes(p, later, later)
	}
	if cn, err := handshake(lis, client); err != nil || cn != "second" {
		t.Fatalf("after the rotation: %q %v, want the new certificate", cn, err)
	}
	// A file caught half-written keeps the last good certificate in force.
	os.WriteFile(f.Key, []byte("-----BEGIN"), 0o600)
	os.Chtimes(f.Key, later.Add(time.Minute), later.Add(time.Minute))
	if cn, err := handshake(lis, client); err != nil || cn != "second" {
		t.Fatalf("with a broken key file: %q %v, want the last good certificate", cn, err)
	}
}

func TestClientCertificatesAreRequiredWithAClientCA(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "mesh CA"), tlstest.NewCA(t, "another CA")
	sc, sk := ca.Issue(t, "admin")
	cfg, err := Files{Cert: tlstest.Write(t, dir, "tls.crt", sc), Key: tlstest.Write(t, dir, "tls.key", sk),
		ClientCA: tlstest.Write(t, dir, "ca.crt", ca.CertPEM)}.Config()
	if err != nil {
		t.Fatal(err)
	}
	lis := serve(t, cfg)
	clientCert := func(c *tlstest.CA) []tls.Certificate {
		cp, kp := c.Issue(t, "envoy")
		pair, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{{"no client certificate", nil, false}, {"another CA's", clientCert(other), false}, {"the CA's", clientCert(ca), true}} {
		_, err := handshake(lis, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", Certificates: c.certs})
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestFilesThatDoNotLoadAreNamed(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	c, k := ca.Issue(t, "x")
	cert, key := tlstest.Write(t, dir, "c.pem", c), tlstest.Write(t, dir, "k.pem", k)
	for _, f := range []Files{
		{Cert: dir + "/missing.pem", Key: key},
		{Cert: cert, Key: cert},
		{Cert: cert, Key: key, ClientCA: dir + "/nope.pem"},
		{Cert: cert, Key: key, ClientCA: key},
	} {
		_, err := f.Config()
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("%+v: %v, want an error naming the file", f, err)
		}
	}
}

func TestClientFilesThatDoNotLoadAreNamed(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	c, k := ca.Issue(t, "x")
	caFile, cert, key := tlstest.Write(t, dir, "ca.pem", ca.CertPEM), tlstest.Write(t, dir, "c.pem", c), tlstest.Write(t, dir, "k.pem", k)
	for _, f := range []ClientFiles{
		{CA: dir + "/missing.pem"},
		{CA: key},
		{CA: caFile, Cert: cert, Key: cert},
		{Cert: dir + "/gone.pem", Key: key},
	} {
		_, err := f.Client()
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("%+v: %v, want an error naming the file", f, err)
		}
	}
	for _, c := range []struct {
		f    ClientFiles
		want string
	}{
		{ClientFiles{Cert: cert}, "go together"},
		{ClientFiles{SkipNameCheck: true}, "needs a CA of your own"},
		{ClientFiles{CA: caFile, SkipNameCheck: true, ServerName: "redis"}, "exclude each other"},
	} {
		if _, err := c.f.Client(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.f, err, c.want)
		}
	}
}

func TestClientVerifiesAgainstTheCAFileReadAgainWhenItChanges(t *testing.T) {
	dir := t.TempDir()
	first, second := tlstest.NewCA(t, "first CA"), tlstest.NewCA(t, "second CA")
	c, k := second.Issue(t, "server")
	server, err := Files{Cert: tlstest.Write(t, dir, "s.crt", c), Key: tlstest.Write(t, dir, "s.key", k)}.Config()
	if err != nil {
		t.Fatal(err)
	}
	lis := serve(t, server)
	caFile := tlstest.Write(t, dir, "ca.crt", first.CertPEM)
	config, err := ClientFiles{CA: caFile}.Client()
	if err != nil {
		t.Fatal(err)
	}
	dial := func() error {
		cfg, err := config()
		if err != nil {
			return err
		}
		_, err = handshake(lis, cfg)
		return err
	}
	if err := dial(); err == nil {
		t.Fatal("a server of another CA was trusted")
	}
	tlstest.Write(t, dir, "ca.crt", second.CertPEM)
	if err := dial(); err != nil {
		t.Fatalf("after the CA file was replaced by the server's CA: %v", err)
	}
	os.WriteFile(caFile, []byte("half a PEM"), 0o600) // caught mid-write
	if err := dial(); err != nil {
		t.Errorf("a CA file caught mid-write dropped the last good configuration: %v", err)
	}
}
