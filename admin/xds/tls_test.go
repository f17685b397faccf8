package xds

import (
	"crypto/tls"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/admin/tlsfiles"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
	"github.com/sluice-rl/sluice/admin/xds/xdstest"
)

func firstResponse(addr string, creds credentials.TransportCredentials) (string, error) {
	return xdstest.FirstVersion(addr, creds, "envoy-tls", TypeURL, DefaultResourceName)
}

// TestXDSOverMutualTLS: with TLS credentials the policy (and the
// telemetry token in the VM environment) travels encrypted, only to a
// client presenting a certificate of the client CA.
func TestXDSOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "mesh CA")
	sc, sk := ca.Issue(t, "sluice-admin")
	cfg, err := tlsfiles.Files{Cert: tlstest.Write(t, dir, "tls.crt", sc), Key: tlstest.Write(t, dir, "tls.key", sk),
		ClientCA: tlstest.Write(t, dir, "ca.crt", ca.CertPEM)}.Config()
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(nil, Options{GRPCOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}})
	addr := startServer(t, s)
	publish(t, s, 3, policyA)

	cp, kp := ca.Issue(t, "envoy")
	pair, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	withCert := credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}})
	if v, err := firstResponse(addr, withCert); err != nil || v != "3" {
		t.Fatalf("a client with the CA's certificate: %q %v, want version 3", v, err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":             insecure.NewCredentials(),
		"TLS without a cert":    credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}),
		"a server it distrusts": credentials.NewTLS(&tls.Config{RootCAs: tlstest.NewCA(t, "other").Pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}}),
	} {
		if v, err := firstResponse(addr, creds); err == nil {
			t.Errorf("%s: got version %q, want the stream refused", name, v)
		}
	}
}
