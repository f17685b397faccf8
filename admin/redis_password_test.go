package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

func TestRedisPasswordFileFlag(t *testing.T) {
	for _, k := range []string{"SLUICE_RLS_LISTEN", "SLUICE_REDIS_ADDRS", "SLUICE_REDIS_PASSWORD", "SLUICE_REDIS_PASSWORD_FILE", "SLUICE_REDIS_USERNAME", "SLUICE_POSTGRES_URL"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "password")
	writePassword(t, file, "s3cret\n")
	fleetArgs := []string{"-rls-listen", ":1", "-redis-addrs", "r:6379", "-redis-username", "sluice"}
	o, err := parseOptions(append(fleetArgs, "-redis-password-file", file), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if user, password, err := o.Redis.Credentials(context.Background()); user != "sluice" || password != "s3cret" || err != nil {
		t.Errorf("credentials %q %q %v, want the user and the file's password without its newline", user, password, err)
	}
	empty := filepath.Join(dir, "empty")
	writePassword(t, empty, "")
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"-redis-password-file", filepath.Join(dir, "missing")}, "", "-redis-password-file " + filepath.Join(dir, "missing")},
		{[]string{"-redis-password-file", empty}, "", "the file is empty"},
		{[]string{"-redis-password-file", file}, "s3cret", "exclude each other"},
	} {
		t.Setenv("SLUICE_REDIS_PASSWORD", c.env)
		_, err := parseOptions(append(append([]string{}, fleetArgs...), c.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	t.Setenv("SLUICE_REDIS_PASSWORD", "")
	if _, err := parseOptions([]string{"-redis-password-file", file}, io.Discard); err == nil || !strings.Contains(err.Error(), "set -redis-addrs") {
		t.Errorf("without Redis: %v", err)
	}
}

// A password rotated in the file is what the next connection sends; a
// file caught empty keeps the last one.
func TestRedisPasswordFileIsReadForEachNewConnection(t *testing.T) {
	r := fleettest.StartRedis(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer admin.Close()
	setPassword := func(old, new string) {
		t.Helper()
		admin.Close()
		admin = redis.NewClient(&redis.Options{Addr: r.Addr, Password: old})
		if err := admin.ConfigSet(ctx, "requirepass", new).Err(); err != nil {
			t.Fatal(err)
		}
		// Connections stay authenticated; end them, as a rotation runbook would.
		admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes")
	}
	file := filepath.Join(t.TempDir(), "password")
	writePassword(t, file, "first")
	setPassword("", "first")
	open := func(o redisgcra.ClientOptions) *redisgcra.Buckets {
		o.Addrs, o.Timeout = []string{r.Addr}, 2*time.Second
		c, err := redisgcra.NewClient(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return redisgcra.New(c)
	}
	fromFile := open(redisgcra.ClientOptions{Credentials: passwordFile("", file)})
	fixed := open(redisgcra.ClientOptions{Password: "first"})
	for _, b := range []*redisgcra.Buckets{fromFile, fixed} {
		if err := b.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}

	writePassword(t, file, "second")
	setPassword("first", "second")
	if err := pingSoon(fromFile); err != nil {
		t.Errorf("after the password was rotated in the file: %v", err)
	}
	if err := pingSoon(fixed); err == nil {
		t.Error("the control client, its password fixed at start, still authenticates: the rotation did not happen")
	}
	writePassword(t, file, "") // caught mid-write
	admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes")
	if err := pingSoon(fromFile); err != nil {
		t.Errorf("an empty password file broke new connections: %v", err)
	}
}

// pingSoon pings until a new connection answers: the first command after
// the server ended the connections may meet one of them closed.
func pingSoon(b *redisgcra.Buckets) error {
	var err error
	for range 3 {
		if err = b.Ping(context.Background()); err == nil {
			return nil
		}
	}
	return err
}

func writePassword(t *testing.T, path, password string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
}
