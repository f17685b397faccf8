// Package fleettest starts the real servers that fleet-mode tests need:
// redis-server (standalone or a three-node cluster), PostgreSQL and
// envoyproxy/ratelimit, each on free 127.0.0.1 ports with a temporary
// directory, stopped when the test ends (PostgreSQL: see postgres.go).
//
// Without redis-server on PATH the tests are skipped with a message saying
// how to install it, except when CI=true: there a missing server fails the
// test (CI installs it; a skip there would hide a broken setup).
package fleettest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// Require returns the path of name (a binary on PATH), or skips tb, or
// fails it under CI=true.
func Require(tb testing.TB, name, install string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found on PATH (%s)", name, install)
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg + "; CI must have it")
	}
	tb.Skip(msg + "; skipping")
	return ""
}

func requireRedis(tb testing.TB) string {
	return Require(tb, "redis-server", "apt-get install redis-server")
}

// Redis is one redis-server process.
type Redis struct {
	Addr string
	dir  string
	args []string
	tls  *TLS
	cmd  *exec.Cmd
	tb   testing.TB
}

// TLS makes the servers serve TLS only, on their one port.
type TLS struct {
	Cert, Key string // PEM files of the servers' certificate and key
	CA        string // PEM file of the CA that verifies client certificates (Redis needs one)
	// AuthClients requires a client certificate signed by CA
	// (tls-auth-clients yes).
	AuthClients bool
	// Client is how the helpers' own clients connect (readiness checks,
	// cluster creation): it must trust the servers and, with
	// AuthClients, present a certificate; its Certificates[0] is written
	// out for redis-cli.
	Client *tls.Config
}

// ServerTLS is TLS with the files of f: the servers serve f's certificate,
// verify client certificates against its CA, and the helpers connect
// trusting that CA and presenting the same certificate.
func ServerTLS(f tlstest.Files, authClients bool) TLS {
	return TLS{Cert: f.CertFile, Key: f.KeyFile, CA: f.CAFile, AuthClients: authClients,
		Client: &tls.Config{RootCAs: f.CA.Pool, Certificates: []tls.Certificate{f.Pair}}}
}

// StartRedis starts a standalone redis-server without persistence.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	r := newRedis(tb, nil, nil)
	r.Start()
	return r
}

// StartRedisTLS starts a standalone redis-server serving TLS only.
func StartRedisTLS(tb testing.TB, t TLS) *Redis {
	tb.Helper()
	r := newRedis(tb, nil, &t)
	r.Start()
	return r
}

func newRedis(tb testing.TB, extra []string, t *TLS) *Redis {
	bin := requireRedis(tb)
	dir := tb.TempDir()
	port := strconv.Itoa(FreePort(tb))
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
		"--logfile", filepath.Join(dir, "redis.log")}
	if t != nil {
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		args[1] = "0"
		args = append(args, "--tls-port", port, "--tls-cert-file", t.Cert, "--tls-key-file", t.Key,
			"--tls-ca-cert-file", t.CA, "--tls-auth-clients", auth, "--tls-cluster", "yes", "--tls-replication", "yes")
	}
	return &Redis{Addr: net.JoinHostPort("127.0.0.1", port), dir: dir, tls: t,
		args: append(append([]string{bin}, args...), extra...), tb: tb}
}

// clientTLS is how the helpers connect to servers started with t.
func clientTLS(t *TLS) *tls.Config {
	if t == nil {
		return nil
	}
	return t.Client
}

// Start (re)starts the server on its address and waits until it answers.
func (r *Redis) Start() {
	r.tb.Helper()
	r.cmd = exec.Command(r.args[0], r.args[1:]...)
	var out bytes.Buffer
	r.cmd.Stdout, r.cmd.Stderr = &out, &out
	if err := r.cmd.Start(); err != nil {
		r.tb.Fatalf("starting redis-server: %v", err)
	}
	cmd := r.cmd
	r.tb.Cleanup(func() { stop(cmd) })
	if err := waitPing(r.Addr, clientTLS(r.tls), 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
		r.tb.Fatalf("redis-server on %s did not answer: %v\n%s%s", r.Addr, err, out.String(), log)
	}
}

// Kill stops the server at once (SIGKILL): the clients see connections
// reset and refused, as when a Redis host dies.
func (r *Redis) Kill() {
	if r.cmd != nil {
		stop(r.cmd)
		r.cmd = nil
	}
}

func stop(cmd *exec.Cmd) {
	if cmd.Process != nil && cmd.ProcessState == nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

func waitPing(addr string, tlsConfig *tls.Config, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, TLSConfig: tlsConfig})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartCluster starts a Redis Cluster of three masters (no replicas) and
// returns their addresses once every node reports cluster_state:ok.
func StartCluster(tb testing.TB) []string {
	tb.Helper()
	return startCluster(tb, nil)
}

// StartClusterTLS is StartCluster with every node, and the cluster bus,
// serving TLS only.
func StartClusterTLS(tb testing.TB, t TLS) []string {
	tb.Helper()
	return startCluster(tb, &t)
}

func startCluster(tb testing.TB, t *TLS) []string {
	cli := Require(tb, "redis-cli", "apt-get install redis-tools")
	var addrs []string
	for range 3 {
		// The cluster bus port is chosen free too: by default it is the
		// port + 10000, which another process may hold (a node once
		// failed to start so, "Address already in use").
		r := newRedis(tb, []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(FreePort(tb))}, t)
		r.Start()
		addrs = append(addrs, r.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	args = append(args, cliTLSArgs(tb, t)...)
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		if err := waitClusterOK(a, clientTLS(t), 10*time.Second); err != nil {
			tb.Fatalf("cluster node %s: %v", a, err)
		}
	}
	if err := waitClusterWritable(addrs, clientTLS(t), 10*time.Second); err != nil {
		tb.Fatalf("cluster %v: %v", addrs, err)
	}
	return addrs
}

// waitClusterWritable waits until a cluster client can write on every
// shard: cluster_state:ok on each node does not yet mean that every node
// agrees on the slots (CLUSTERDOWN, MOVED for a moment after creation).
func waitClusterWritable(addrs []string, tlsConfig *tls.Config, within time.Duration) error {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, TLSConfig: tlsConfig})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		var err error
		// Hash tags {a}, {b}, {c} fall on the three masters' slot ranges
		// (15495, 3300 and 7365 of 16384).
		for _, k := range []string{"{a}", "{b}", "{c}"} {
			if err = c.Set(context.Background(), "fleettest:"+k, "1", time.Second).Err(); err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not writable: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitClusterOK(addr string, tlsConfig *tls.Config, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: tlsConfig})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		info, err := c.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ok: %v %q", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as when a Redis host hangs or the network drops packets.
func (r *Redis) Pause() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume undoes Pause.
func (r *Redis) Resume() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// StartSentinel starts a Redis Sentinel watching the server at masterAddr
// under the master name name, with a quorum of 1, and returns its address.
func StartSentinel(tb testing.TB, masterAddr, name string) string {
	tb.Helper()
	return startSentinel(tb, masterAddr, name, nil)
}

// StartSentinelTLS is StartSentinel serving TLS only, and reaching the
// master (started with the same t) over TLS.
func StartSentinelTLS(tb testing.TB, masterAddr, name string, t TLS) string {
	tb.Helper()
	return startSentinel(tb, masterAddr, name, &t)
}

func startSentinel(tb testing.TB, masterAddr, name string, t *TLS) string {
	bin := requireRedis(tb)
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	own := FreePort(tb)
	// Sentinel rewrites its configuration file: it must be its own, writable.
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nlogfile %s\n"+
		"sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n",
		own, dir, filepath.Join(dir, "sentinel.log"), name, host, port, name)
	if t != nil {
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		// The master is reached with the same certificate it serves
		// (issued for both server and client use).
		conf = strings.Replace(conf, fmt.Sprintf("port %d\n", own), fmt.Sprintf("port 0\ntls-port %d\n", own), 1) +
			fmt.Sprintf("tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients %s\ntls-replication yes\n", t.Cert, t.Key, t.CA, auth)
	}
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, path, "--sentinel")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting redis-server --sentinel: %v", err)
	}
	tb.Cleanup(func() { stop(cmd) })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(own))
	if err := waitPing(addr, clientTLS(t), 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
		tb.Fatalf("sentinel on %s did not answer: %v\n%s", addr, err, log)
	}
	return addr
}

// cliTLSArgs are redis-cli's flags to connect as t.Client does: the CA,
// and the client certificate written out when the servers ask for one.
func cliTLSArgs(tb testing.TB, t *TLS) []string {
	if t == nil {
		return nil
	}
	args := []string{"--tls", "--cacert", t.CA}
	if t.AuthClients && len(t.Client.Certificates) > 0 {
		c := t.Client.Certificates[0]
		var certPEM []byte
		for _, der := range c.Certificate {
			certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
		if err != nil {
			tb.Fatal(err)
		}
		dir := tb.TempDir()
		cert, key := filepath.Join(dir, "cli.crt"), filepath.Join(dir, "cli.key")
		if os.WriteFile(cert, certPEM, 0o600) != nil || os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600) != nil {
			tb.Fatal("writing redis-cli's certificate")
		}
		args = append(args, "--cert", cert, "--key", key)
	}
	return args
}
