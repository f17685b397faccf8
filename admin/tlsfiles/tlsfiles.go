// Package tlsfiles serves TLS with a certificate and key read from files,
// read again when they change: a certificate rotated on disk (by
// cert-manager, say) is in force from the next handshake, without a
// restart. It can also require client certificates signed by a CA file
// (mutual TLS), reloaded the same way.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Files are the PEM files of a TLS server.
type Files struct {
	Cert, Key string // the server's certificate chain and private key
	ClientCA  string // "": no client certificate asked; else required and verified against it
}

// Config returns a server tls.Config that reads f now (an error names the
// file that does not load) and again, at the next handshake, whenever one
// of the files has changed.
func (f Files) Config() (*tls.Config, error) {
	r := &reloader{files: f}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current()
		},
	}, nil
}

type reloader struct {
	files Files

	mu     sync.Mutex
	stamps [3]time.Time
	config *tls.Config
}

// current returns the configuration of the files as they are now: the
// one already built while none changed. When a changed file does not load
// (caught mid-write), the last good configuration stays in force.
func (r *reloader) current() (*tls.Config, error) {
	stamps := [3]time.Time{modTime(r.files.Cert), modTime(r.files.Key), modTime(r.files.ClientCA)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.config != nil && stamps == r.stamps {
		return r.config, nil
	}
	c, err := r.files.load()
	if err != nil {
		if r.config != nil {
			return r.config, nil
		}
		return nil, err
	}
	r.config, r.stamps = c, stamps
	return c, nil
}

func (f Files) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", f.Cert, f.Key, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New(f.ClientCA + ": no PEM certificate in it")
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

func modTime(path string) time.Time {
	if path == "" {
		return time.Time{}
	}
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}
