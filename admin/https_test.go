package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// TestAdminHTTPSCertificateIsReadAgainWhenItChanges: with -tls-cert and
// -tls-key the admin serves HTTPS (HTTP/2 and HTTP/1.1), and a certificate
// written over the same files is served from the next handshake.
func TestAdminHTTPSCertificateIsReadAgainWhenItChanges(t *testing.T) {
	first, second := tlstest.WriteFiles(t, "first"), tlstest.WriteFiles(t, "second")
	dir := t.TempDir()
	cert, key := dir+"/tls.crt", dir+"/tls.key"
	copyFile(t, first.CertFile, cert)
	copyFile(t, first.KeyFile, key)
	addr := "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t))
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-data-dir", t.TempDir(), "-listen", addr, "-xds-listen", "off", "-metrics-listen", "off",
			"-token", "admin-token-0123456789", "-tls-cert", cert, "-tls-key", key}, io.Discard, io.Discard)
	}()
	defer func() {
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("the admin did not stop")
		}
	}()

	get := func(roots *x509.CertPool, h2 bool) (string, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("https://" + addr + "/healthz")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Proto, &httpError{resp.Status}
		}
		return resp.Proto, nil
	}
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err = get(first.CA.Pool, false); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("HTTPS with the first certificate: %v", err)
	}
	for _, h2 := range []bool{false, true} {
		want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		if proto, err := get(first.CA.Pool, h2); err != nil || proto != want {
			t.Errorf("h2 offered %v: %s %v, want %s", h2, proto, err, want)
		}
	}

	copyFile(t, second.CertFile, cert)
	copyFile(t, second.KeyFile, key)
	if _, err := get(second.CA.Pool, false); err != nil {
		t.Errorf("after the files were replaced: %v, want the second certificate served", err)
	}
	if _, err := get(first.CA.Pool, false); err == nil {
		t.Error("the first certificate is still served after the files were replaced")
	}
}

type httpError struct{ status string }

func (e *httpError) Error() string { return e.status }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
