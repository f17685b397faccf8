package fleettest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// PostgreSQL servers for the tests.
//
// The binaries come from Debian's package postgresql: initdb and postgres
// on PATH, else the newest /usr/lib/postgresql/<major>/bin (Debian does not
// put them on PATH). Without them a test fails, naming the package; set
// SLUICE_SKIP_POSTGRES=1 to skip instead on a machine without them (never
// under CI=true, where a skip would hide a broken setup).
//
// PostgreSQL refuses to run as root. When the tests run as root (CI does),
// initdb and postgres run as the user postgres (created by the package),
// through setpriv (util-linux), which executes the server itself: signals
// sent to it reach the postmaster, not a wrapper. The data directory is
// then a fresh directory in the system's temporary directory owned by that
// user (the test's own TempDir is under a directory only root may enter).

// SkipPostgresEnv names the variable that turns a missing PostgreSQL into
// a skip outside CI.
const SkipPostgresEnv = "SLUICE_SKIP_POSTGRES"

// PostgresBins holds the paths of initdb and postgres.
type PostgresBins struct{ Initdb, Postgres string }

// RequirePostgres returns the binaries, or fails tb naming the Debian
// package (skips it with SLUICE_SKIP_POSTGRES=1 outside CI).
func RequirePostgres(tb testing.TB) PostgresBins {
	tb.Helper()
	if b, ok := findPostgres(); ok {
		return b
	}
	msg := "PostgreSQL's initdb and postgres not found on PATH nor in /usr/lib/postgresql/*/bin (apt-get install postgresql)"
	if os.Getenv("CI") != "true" && os.Getenv(SkipPostgresEnv) == "1" {
		tb.Skip(msg + "; skipping (" + SkipPostgresEnv + "=1)")
	}
	tb.Fatal(msg + "; or set " + SkipPostgresEnv + "=1 to skip these tests outside CI")
	return PostgresBins{}
}

func findPostgres() (PostgresBins, bool) {
	i, err1 := exec.LookPath("initdb")
	p, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return PostgresBins{i, p}, true
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major first: "15" before "9.6" compares as numbers.
	sort.Slice(dirs, func(a, b int) bool { return major(dirs[a]) > major(dirs[b]) })
	for _, d := range dirs {
		b := PostgresBins{filepath.Join(d, "initdb"), filepath.Join(d, "postgres")}
		if isExec(b.Initdb) && isExec(b.Postgres) {
			return b, true
		}
	}
	return PostgresBins{}, false
}

func major(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Postgres is one PostgreSQL server (a postmaster and its data directory).
type Postgres struct {
	// URL connects as the superuser postgres over TCP, without a
	// password (trust authentication on 127.0.0.1 only).
	URL  string
	Port int
	dir  string
	bins PostgresBins
	run  *runAs
	cmd  *exec.Cmd
	log  *bytes.Buffer
	tb   testing.TB
	conf []string
}

// PostgresOptions are server settings (postgres -c name=value).
type PostgresOptions struct {
	// Durable keeps fsync and full_page_writes on (the server's defaults):
	// for benchmarks. Tests run without them, which only matters if the
	// machine crashes.
	Durable bool
	// Settings are more -c name=value.
	Settings []string
	// TLS, when set, makes the server accept TLS.
	TLS *PostgresTLS
}

// PostgresTLS are the server's TLS files (PEM; copied where the server's
// user may read them).
type PostgresTLS struct {
	Cert, Key string // the server's certificate (for 127.0.0.1) and key
	CA        string // the CA of client certificates
	// ClientCerts accepts TCP clients only over TLS with a certificate of
	// CA naming the database user (pg_hba "cert"); without it, any client
	// is trusted, with or without TLS.
	ClientCerts bool
}

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

// StartPostgres starts a fresh PostgreSQL server on a free 127.0.0.1 port
// and stops it when the test ends. Every server copies a cluster made by
// initdb once per machine (and PostgreSQL version and user), kept in the
// system's temporary directory.
func StartPostgres(tb testing.TB, o PostgresOptions) *Postgres {
	tb.Helper()
	bins := RequirePostgres(tb)
	run, err := postgresUser()
	if err != nil {
		tb.Fatal(err)
	}
	templateOnce.Do(func() { templateDir, templateErr = initTemplate(bins, run) })
	if templateErr != nil {
		tb.Fatal(templateErr)
	}
	dir, err := run.mkdirTemp("sluice-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	// cp -a keeps the owner and the 0700 mode postgres insists on.
	if out, err := exec.Command("cp", "-a", templateDir, data).CombinedOutput(); err != nil {
		tb.Fatalf("copying the initdb template: %v\n%s", err, out)
	}
	port := FreePort(tb)
	conf := []string{"listen_addresses=127.0.0.1", "port=" + strconv.Itoa(port),
		"unix_socket_directories=" + dir, "max_connections=200", "logging_collector=off"}
	if !o.Durable {
		conf = append(conf, "fsync=off", "full_page_writes=off")
	}
	if o.TLS != nil {
		tlsConf, err := serverTLS(*o.TLS, dir, run)
		if err != nil {
			tb.Fatal(err)
		}
		conf = append(conf, tlsConf...)
	}
	conf = append(conf, o.Settings...)
	p := &Postgres{Port: port, dir: data, bins: bins, run: run, tb: tb, conf: conf,
		URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	p.Start()
	return p
}

// Start (re)starts the server on its port and data directory and waits
// until it accepts connections.
func (p *Postgres) Start() {
	p.tb.Helper()
	args := []string{"-D", p.dir}
	for _, c := range p.conf {
		args = append(args, "-c", c)
	}
	p.log = &bytes.Buffer{}
	p.cmd = p.run.command(p.bins.Postgres, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.tb.Fatalf("starting postgres: %v", err)
	}
	cmd := p.cmd
	p.tb.Cleanup(func() { stopPostgres(cmd) })
	if err := waitPostgres(p.Port, 30*time.Second); err != nil {
		p.tb.Fatalf("postgres on port %d did not accept connections: %v\n%s", p.Port, err, p.log.String())
	}
}

// Stop shuts the server down at once (immediate shutdown: SIGQUIT, the
// backends end without a checkpoint): clients see their connections
// closed, then refused, as when a database host goes away. Start runs
// crash recovery and serves the same data again.
func (p *Postgres) Stop() {
	if p.cmd != nil {
		stopPostgres(p.cmd)
		p.cmd = nil
	}
}

func stopPostgres(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	signalAll(cmd.Process.Pid, syscall.SIGCONT) // if paused
	cmd.Process.Signal(syscall.SIGQUIT)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		signalAll(cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Pause freezes the postmaster and every backend (SIGSTOP): connections
// stay open and nothing answers, as when a database host hangs or the
// network drops packets.
func (p *Postgres) Pause() {
	if p.cmd != nil && p.cmd.Process != nil {
		signalAll(p.cmd.Process.Pid, syscall.SIGSTOP)
	}
}

// Resume undoes Pause.
func (p *Postgres) Resume() {
	if p.cmd != nil && p.cmd.Process != nil {
		signalAll(p.cmd.Process.Pid, syscall.SIGCONT)
	}
}

// signalAll signals the postmaster, then its children (the backends,
// each in a session of its own, so a process group signal would miss
// them), found in /proc.
func signalAll(postmaster int, sig syscall.Signal) {
	syscall.Kill(postmaster, sig)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, the last ')' ends it.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 || f[1] != strconv.Itoa(postmaster) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(st))); err == nil {
			syscall.Kill(pid, sig)
		}
	}
}

// Log is what the server printed since its last start.
func (p *Postgres) Log() string { return p.log.String() }

// initTemplate returns the template cluster, made by initdb in a
// directory of its own and renamed into place, so that test processes
// running at once never see half of one.
func initTemplate(bins PostgresBins, run *runAs) (string, error) {
	out, err := exec.Command(bins.Postgres, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %v", err)
	}
	version := "unknown" // "postgres (PostgreSQL) 15.14 (Debian ...)": the first number
	for _, f := range strings.Fields(string(out)) {
		if f[0] >= '0' && f[0] <= '9' {
			version = f
			break
		}
	}
	final := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-pg-template-%s-%d", version, os.Geteuid()))
	if _, err := os.Stat(filepath.Join(final, "PG_VERSION")); err == nil {
		return final, nil
	}
	dir, err := run.mkdirTemp("sluice-pg-initdb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	cmd := run.command(bins.Initdb, "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := os.Rename(data, final); err != nil {
		if _, statErr := os.Stat(filepath.Join(final, "PG_VERSION")); statErr == nil {
			return final, nil // another process was first
		}
		return "", err
	}
	return final, nil
}

// runAs runs the server's programs as the current user, or as the user
// postgres when the current one is root.
type runAs struct {
	uid, gid int // -1: the current user
	name     string
}

func postgresUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return &runAs{uid: -1, gid: -1}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to: no user postgres to run it as (apt-get install postgresql creates it): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if _, err := exec.LookPath("setpriv"); err != nil {
		return nil, fmt.Errorf("running as root: setpriv (util-linux) is needed to run PostgreSQL as the user postgres: %v", err)
	}
	return &runAs{uid: uid, gid: gid, name: u.Username}, nil
}

func (r *runAs) command(bin string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if r.uid < 0 {
		cmd = exec.Command(bin, args...)
	} else {
		// setpriv executes bin in its place (no fork): signals reach it.
		cmd = exec.Command("setpriv", append([]string{"--reuid=" + strconv.Itoa(r.uid),
			"--regid=" + strconv.Itoa(r.gid), "--clear-groups", "--", bin}, args...)...)
	}
	// A working directory the server's user may enter.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if r.uid >= 0 {
		cmd.Env = append(cmd.Env, "HOME="+os.TempDir(), "USER="+r.name, "LOGNAME="+r.name)
	}
	return cmd
}

func (r *runAs) mkdirTemp(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if r.uid >= 0 {
		if err := os.Chown(dir, r.uid, r.gid); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// serverTLS copies t's files into dir for the server's user and returns
// the settings that use them.
func serverTLS(t PostgresTLS, dir string, run *runAs) ([]string, error) {
	files := map[string]string{"server.crt": t.Cert, "server.key": t.Key, "ca.crt": t.CA}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\n"
	if t.ClientCerts {
		hba = "local all all trust\nhostssl all all 127.0.0.1/32 cert\n"
	}
	for name, from := range files {
		b, err := os.ReadFile(from)
		if err != nil {
			return nil, err
		}
		if err := writeFor(run, filepath.Join(dir, name), b); err != nil {
			return nil, err
		}
	}
	if err := writeFor(run, filepath.Join(dir, "pg_hba.conf"), []byte(hba)); err != nil {
		return nil, err
	}
	return []string{"ssl=on", "ssl_cert_file=" + filepath.Join(dir, "server.crt"), "ssl_key_file=" + filepath.Join(dir, "server.key"),
		"ssl_ca_file=" + filepath.Join(dir, "ca.crt"), "hba_file=" + filepath.Join(dir, "pg_hba.conf")}, nil
}

// writeFor writes a file the server's user owns, mode 0600 (PostgreSQL
// refuses a key file others may read).
func writeFor(run *runAs, path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	if run.uid >= 0 {
		return os.Chown(path, run.uid, run.gid)
	}
	return nil
}

// waitPostgres waits until the server answers the protocol's first
// message on port: a startup packet gets an authentication request ('R')
// once the server accepts connections, an error ('E', "the database
// system is starting up") before.
func waitPostgres(port int, within time.Duration) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		if last = probePostgres(addr); last == nil {
			return nil
		}
		time.Sleep(30 * time.Millisecond)
	}
	return last
}

func probePostgres(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	params := "user\x00postgres\x00database\x00postgres\x00\x00"
	msg := make([]byte, 8, 8+len(params))
	n := len(msg) + len(params)
	msg[0], msg[1], msg[2], msg[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	msg[4], msg[5], msg[6], msg[7] = 0, 3, 0, 0 // protocol 3.0
	msg = append(msg, params...)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	reply := make([]byte, 512)
	k, err := c.Read(reply)
	if err != nil {
		return err
	}
	// 'R', or a refusal by pg_hba.conf (a server accepting TLS clients
	// only): the server is accepting connections.
	if reply[0] == 'R' || strings.Contains(string(reply[:k]), "pg_hba.conf") {
		return nil
	}
	return fmt.Errorf("server answered %q", strings.ToValidUTF8(string(reply[:k]), "?"))
}

// PostgresWithClientCerts is a PostgreSQL accepting TCP clients only over
// TLS with a client certificate for the database user postgres, and the
// files of such a client, which PutClientCert writes over.
type PostgresWithClientCerts struct {
	*Postgres
	Server                    tlstest.Files // the CA, and the server's certificate (CN postgres)
	CAFile, CertFile, KeyFile string        // the client's: the server's CA, its certificate and key
}

// StartPostgresWithClientCerts starts it, the client's certificate issued
// by the server's CA.
func StartPostgresWithClientCerts(tb testing.TB) *PostgresWithClientCerts {
	tb.Helper()
	server := tlstest.WriteFiles(tb, "postgres") // CN postgres: a client certificate too, for pg_hba "cert"
	p := &PostgresWithClientCerts{Server: server, CAFile: server.CAFile}
	p.Postgres = StartPostgres(tb, PostgresOptions{TLS: &PostgresTLS{Cert: server.CertFile, Key: server.KeyFile, CA: server.CAFile, ClientCerts: true}})
	dir := tb.TempDir()
	p.CertFile, p.KeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	p.PutClientCert(tb, server.CA)
	return p
}

// PutClientCert writes a new client certificate for the user postgres,
// issued by ca, over the client's files.
func (p *PostgresWithClientCerts) PutClientCert(tb testing.TB, ca *tlstest.CA) {
	tb.Helper()
	cert, key := ca.Issue(tb, "postgres")
	tlstest.Write(tb, filepath.Dir(p.CertFile), filepath.Base(p.CertFile), cert)
	tlstest.Write(tb, filepath.Dir(p.KeyFile), filepath.Base(p.KeyFile), key)
}

// TLSURL is the connection string of the client's files, the server's
// certificate verified (sslmode=verify-full); extra is appended ("&...").
func (p *PostgresWithClientCerts) TLSURL(extra string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s%s",
		p.Port, p.CAFile, p.CertFile, p.KeyFile, extra)
}
