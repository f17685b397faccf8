package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
)

// redisPasswordFlags declares -redis-password-file; the returned function
// checks it once the fleet flags are parsed, and sets o.Redis.Credentials.
func (o *options) redisPasswordFlags(fs *flag.FlagSet) func() error {
	var path string
	fs.StringVar(&path, "redis-password-file", env("SLUICE_REDIS_PASSWORD_FILE", ""), "read the Redis password from this file, again for each new connection (a rotated password is used without a restart); instead of SLUICE_REDIS_PASSWORD (SLUICE_REDIS_PASSWORD_FILE)")
	return func() error {
		switch {
		case path == "":
			return nil
		case o.Redis.Password != "":
			return errors.New("-redis-password-file and SLUICE_REDIS_PASSWORD exclude each other: give the password one way")
		case len(o.Redis.Addrs) == 0:
			return errors.New("-redis-password-file: set -redis-addrs too (the password is Redis')")
		}
		creds := passwordFile(o.Redis.Username, path)
		if _, _, err := creds(context.Background()); err != nil {
			return err
		}
		o.Redis.Credentials = creds
		return nil
	}
}

// passwordFile gives user and the password in the file at path as it is
// now, the end of line trimmed. A file that cannot be read or is empty
// (caught mid-write) leaves the last password read in use.
func passwordFile(user, path string) func(context.Context) (string, string, error) {
	var mu sync.Mutex
	var last string
	return func(context.Context) (string, string, error) {
		b, err := os.ReadFile(path)
		password := strings.TrimRight(string(b), "\r\n")
		mu.Lock()
		defer mu.Unlock()
		if err == nil && password != "" {
			last = password
		}
		if last == "" {
			if err == nil {
				err = errors.New("the file is empty")
			}
			return "", "", fmt.Errorf("-redis-password-file %s: %w", path, err)
		}
		return user, last, nil
	}
}
