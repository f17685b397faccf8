// Package tlsfiles serves TLS with a certificate and key read from files,
// read again when they change: a certificate rotated on disk (by
// cert-manager, say) is in force from the next handshake, without a
// restart. It can also require client certificates signed by a CA file
// (mutual TLS), reloaded the same way. On the client side (ClientFiles)
// it verifies a server against a CA file and presents a client
// certificate, both read again when they change.
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
	r := &reloader{paths: [3]string{f.Cert, f.Key, f.ClientCA}, load: f.load}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The handshake takes the protocols of the config built from the
		// files; listed here too, because net/http sets up HTTP/2 on a TLS
		// listener only when the server's own config lists h2 (a client
		// that negotiated h2 would otherwise get HTTP/1.1 bytes).
		NextProtos: serverProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current()
		},
	}, nil
}

// serverProtos are the ALPN protocols a server offers: HTTP/2 (gRPC, and
// HTTP/2 clients of the admin's HTTPS port) and HTTP/1.1.
var serverProtos = []string{"h2", "http/1.1"}

// reloader keeps the configuration that load builds from up to three
// files, building it again when one of them has changed.
type reloader struct {
	paths [3]string
	load  func() (*tls.Config, error)

	mu     sync.Mutex
	stamps [3]time.Time
	config *tls.Config
}

// current returns the configuration of the files as they are now: the
// one already built while none changed. When a changed file does not load
// (caught mid-write), the last good configuration stays in force.
func (r *reloader) current() (*tls.Config, error) {
	stamps := [3]time.Time{modTime(r.paths[0]), modTime(r.paths[1]), modTime(r.paths[2])}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.config != nil && stamps == r.stamps {
		return r.config, nil
	}
	c, err := r.load()
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
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: serverProtos}
	if f.ClientCA != "" {
		pool, err := readPool(f.ClientCA)
		if err != nil {
			return nil, err
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// ClientFiles are the PEM files of a TLS client. Every field may be empty.
type ClientFiles struct {
	// CA verifies the server's certificate instead of the system's roots.
	CA string
	// Cert and Key are presented when the server asks for a client
	// certificate (mutual TLS); both or neither.
	Cert, Key string
	// ServerName is the name the server's certificate must hold instead
	// of the dialed host: for servers reached by IP address or announcing
	// addresses their certificate does not name.
	ServerName string
	// SkipNameCheck verifies the server's certificate chain against CA
	// but not the name it holds: for services whose certificates name
	// neither the address nor anything a client could give. It needs a
	// CA of one's own (with the system's roots any public certificate
	// would do) and excludes ServerName.
	SkipNameCheck bool
}

// Client returns a function giving the tls.Config of a new connection. It
// reads f now (an error names the file that does not load) and again,
// at the next connection, whenever one of the files has changed; a changed
// file that does not load (caught mid-write) leaves the last good
// configuration in force.
func (f ClientFiles) Client() (func() (*tls.Config, error), error) {
	switch {
	case (f.Cert == "") != (f.Key == ""):
		return nil, errors.New("a client certificate and its key go together")
	case f.SkipNameCheck && f.CA == "":
		return nil, errors.New("skipping the name check needs a CA of your own: with the system's roots any public certificate would pass")
	case f.SkipNameCheck && f.ServerName != "":
		return nil, errors.New("a server name to check and skipping the name check exclude each other")
	}
	r := &reloader{paths: [3]string{f.CA, f.Cert, f.Key}, load: f.load}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return r.current, nil
}

func (f ClientFiles) load() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pool, err := readPool(f.CA)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
		if f.SkipNameCheck {
			c.InsecureSkipVerify, c.VerifyConnection = true, verifyChain(pool)
		}
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%s and %s: %w", f.Cert, f.Key, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// verifyChain verifies a server's certificate chain against roots, and
// not its name: what Go's own verification does with the name left out.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

// readPool reads the PEM certificates of path as a pool.
func readPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New(path + ": no PEM certificate in it")
	}
	return pool, nil
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
