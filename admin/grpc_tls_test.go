package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
	"github.com/sluice-rl/sluice/admin/xds"
	"github.com/sluice-rl/sluice/admin/xds/xdstest"
)

func adsVersion(addr string, creds credentials.TransportCredentials) (string, error) {
	return xdstest.FirstVersion(addr, creds, "envoy-1", xds.TypeURL, xds.DefaultResourceName)
}

// TestAdminServesXDSOverMutualTLS: with -grpc-tls-cert, -grpc-tls-key and
// -grpc-client-ca the admin pushes its policy only to an Envoy presenting
// a certificate of that CA.
func TestAdminServesXDSOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "mesh CA")
	sc, sk := ca.Issue(t, "sluice-admin")
	port := func() string { return "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t)) }
	r := startAdminProcess(t, &replica{http: port(), xds: port(), stderr: &bytes.Buffer{}}, nil,
		"-grpc-tls-cert", tlstest.Write(t, dir, "tls.crt", sc), "-grpc-tls-key", tlstest.Write(t, dir, "tls.key", sk),
		"-grpc-client-ca", tlstest.Write(t, dir, "ca.crt", ca.CertPEM))
	cp, kp := ca.Issue(t, "envoy")
	pair, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := adsVersion(r.xds, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}})); err != nil || v != "1" {
		t.Fatalf("an Envoy with the CA's certificate: %q %v, want version 1\n%s", v, err, r.stderr)
	}
	if _, err := adsVersion(r.xds, insecure.NewCredentials()); err == nil {
		t.Error("a plaintext client got the policy")
	}
	if _, err := adsVersion(r.xds, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, ServerName: "localhost"})); err == nil {
		t.Error("a client without a certificate got the policy")
	}
}

func TestGRPCTLSFlagErrorsNameTheFlag(t *testing.T) {
	for _, k := range []string{"SLUICE_GRPC_TLS_CERT", "SLUICE_GRPC_TLS_KEY", "SLUICE_GRPC_CLIENT_CA"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-grpc-tls-cert", "c.pem"}, "-grpc-tls-cert and -grpc-tls-key go together"},
		{[]string{"-grpc-client-ca", "ca.pem"}, "-grpc-client-ca: needs"},
		{[]string{"-grpc-tls-cert", dir + "/c.pem", "-grpc-tls-key", dir + "/k.pem"}, "-grpc-tls-cert/-grpc-tls-key/-grpc-client-ca: " + dir},
	} {
		if _, err := parseOptions(c.args, io.Discard); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error starting %q", c.args, err, c.want)
		}
	}
}
