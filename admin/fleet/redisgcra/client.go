package redisgcra

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ClientOptions chooses the Redis deployment:
//
//   - one address, no MasterName, not Cluster: a standalone server;
//   - several addresses (or Cluster): a Redis Cluster, the addresses are
//     seeds from which the client learns the slots;
//   - MasterName: Sentinel, the addresses are the sentinels'.
type ClientOptions struct {
	Addrs      []string
	MasterName string
	Cluster    bool // cluster mode even with one seed address
	Username   string
	Password   string
	// Timeout bounds dialing, each read and write: a Redis that does not
	// answer within it counts as down, and the RLS answers UNAVAILABLE
	// instead of holding Envoy's request.
	Timeout time.Duration
	// PoolSize is the connections per server (default 10 per CPU).
	PoolSize int
	// TLS, when set, gives the TLS configuration of each new connection
	// (to servers and sentinels alike); nil: plaintext. It is asked per
	// connection so that rotated certificate files are used without a
	// restart (tlsfiles.ClientFiles.Client).
	TLS func() (*tls.Config, error)
	// Credentials, when set, gives the user name and password of each new
	// connection instead of Username and Password: a password rotated in
	// a file is used without a restart.
	Credentials func(context.Context) (username, password string, err error)
}

// ParseAddrs splits a comma-separated address list, dropping blanks.
func ParseAddrs(s string) []string {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// NewClient returns the go-redis UniversalClient for o. It does not
// connect: the first command does.
func NewClient(o ClientOptions) (redis.UniversalClient, error) {
	if len(o.Addrs) == 0 {
		return nil, ErrNoAddrs
	}
	if o.MasterName != "" && o.Cluster {
		return nil, fmt.Errorf("a Sentinel master name (%q) and cluster mode exclude each other", o.MasterName)
	}
	if o.Timeout <= 0 {
		o.Timeout = 100 * time.Millisecond
	}
	var dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	if o.TLS != nil {
		dialer = tlsDialer(o.Timeout, o.TLS)
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Dialer:        dialer,
		Addrs:         o.Addrs,
		MasterName:    o.MasterName,
		IsClusterMode: o.Cluster,
		Username:      o.Username,
		Password:      o.Password,
		// go-redis asks it at each new connection; nil: the two above.
		CredentialsProviderContext: o.Credentials,
		DialTimeout:                o.Timeout,
		ReadTimeout:                o.Timeout,
		WriteTimeout:               o.Timeout,
		// The caller's context deadline (the RLS call's budget) bounds
		// every command, not only the socket timeouts.
		ContextTimeoutEnabled: true,
		// No retries by go-redis: after a connection error or a retriable
		// reply to a batch's first command it sends the whole batch again,
		// re-running scripts that had already run (a take charged twice, a
		// return credited twice). Buckets.Run re-sends only the ops Redis
		// refused without running them; anything else is the caller's
		// UNAVAILABLE, and Envoy (or the plugin) has its own failure mode.
		MaxRetries: -1,
		// go-redis retries a failed dial 5 times 100 ms apart by default:
		// far past the budget. A refused connection is an answer: Redis is
		// down, say so at once.
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
		PoolSize:           o.PoolSize,
		PoolTimeout:        o.Timeout,
		// Cluster: likewise no pipeline retries (they follow MOVED, but
		// also re-send a node's whole batch on errors); Run follows a MOVED
		// once itself.
		MaxRedirects: -1,
		// Sluice does not use client-side caching or RESP3 push messages.
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}), nil
}

// tlsDialer dials TLS connections with the configuration config gives at
// each dial, the handshake within timeout (and the caller's context) as
// the connection is: a Redis that accepts TCP but never completes the
// handshake is down like one that does not answer. The certificate must
// name the dialed host unless the configuration sets ServerName. The
// keep-alives are go-redis' own dialer's.
func tlsDialer(timeout time.Duration, config func() (*tls.Config, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	netDialer := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := config()
		if err != nil {
			return nil, fmt.Errorf("TLS to %s: %w", addr, err)
		}
		d := tls.Dialer{NetDialer: netDialer, Config: c}
		return d.DialContext(ctx, network, addr)
	}
}
