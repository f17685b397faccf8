package main

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"

	"github.com/sluice-rl/sluice/internal/poll"
)

// tokenEnvConfig limits each API key to a burst of 3 and reports to
// cluster sluice_admin with the token in the VM environment.
const tokenEnvConfig = `{"telemetry": {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN"},
  "rules": [{"name": "apikey", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
    "algorithm_config": {"tokens_per_second": 0.001, "burst": 3}}]}`

const telToken = "telemetry-token-0123456789abcdef"

// telemetryReceiver counts the reports that carry telToken.
func telemetryReceiver(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var accepted atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+telToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		accepted.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &accepted
}

// TestXDSPushedVMEnvCarriesTheTelemetryToken: the admin pushes the
// telemetry token in vm_config's environment and a policy with token_env;
// the gateway starts VMs with that environment (as Envoy does for a new
// vm_config), ACKs, and its reports carry the token.
// Pushing again with the same vm_config keeps those VMs and their buckets.
func TestXDSPushedVMEnvCarriesTheTelemetryToken(t *testing.T) {
	srv, accepted := telemetryReceiver(t)
	addr := freeAddr(t)
	adm := startAdminWith(t, addr, map[string]string{"SLUICE_TELEMETRY_TOKEN": telToken})
	up := newUpstream(t)
	gw := startXDSGateway(t, up.srv.URL, addr, func(o *Options) {
		u, _ := url.Parse(srv.URL)
		o.Clusters = map[string]*url.URL{"sluice_admin": u}
	})
	bootHost := gw.Host()
	adm.publish(t, 1, tokenEnvConfig)
	adm.waitAcked(t, "gw-test", "1")
	if gw.Host() == bootHost {
		t.Fatal("a new VM environment did not start new VMs")
	}
	if env := gw.cur.Load().env; env["SLUICE_TELEMETRY_TOKEN"] != telToken {
		t.Fatalf("VM environment %v", env)
	}
	// Traffic: 3 allowed, then 429 for the key.
	codes := ""
	for range 5 {
		resp, _ := getWith(t, gw.URL()+"/", "x-api-key", "sk_live_gw_000001")
		codes += resp.Status[:3] + " "
	}
	if codes != "200 200 200 429 429 " {
		t.Fatalf("statuses %q", codes)
	}
	poll.Until(t, "a report accepted by the admin", func() bool { return accepted.Load() > 0 })

	// Same environment, new policy: a config-only update on the same VMs.
	vms := gw.Host()
	adm.publish(t, 2, strings.Replace(tokenEnvConfig, `{"telemetry"`, `{"reject_status": 503, "telemetry"`, 1))
	adm.waitAcked(t, "gw-test", "2")
	if gw.Host() != vms {
		t.Fatal("an unchanged VM environment restarted the VMs")
	}
	// The bucket is kept (still empty) and the new policy applies.
	if resp, _ := getWith(t, gw.URL()+"/", "x-api-key", "sk_live_gw_000001"); resp.StatusCode != 503 {
		t.Fatalf("after the update: %d, want 503 from the kept, empty bucket", resp.StatusCode)
	}
}

// TestXDSMissingTokenEnvIsNACKed: a policy with token_env whose variable
// neither -vm-env nor the admin provides is refused and the previous
// configuration stays in force.
func TestXDSMissingTokenEnvIsNACKed(t *testing.T) {
	addr := freeAddr(t)
	adm := startAdmin(t, addr)
	up := newUpstream(t)
	gw := startXDSGateway(t, up.srv.URL, addr)
	adm.publish(t, 1, tokenEnvConfig)
	poll.Until(t, "the NACK", func() bool { return adm.node("gw-test").NackedVersion == "1" })
	if msg := adm.node("gw-test").NackError; !strings.Contains(msg, "telemetry.token_env") || !strings.Contains(msg, "SLUICE_TELEMETRY_TOKEN") {
		t.Fatalf("NACK error %q", msg)
	}
	if resp, _ := get(t, gw.URL()+"/"); resp.StatusCode != 200 {
		t.Fatalf("bootstrap config not in force: %d", resp.StatusCode)
	}
}

func TestPushedEnv(t *testing.T) {
	host := map[string]string{"GOGC": "200", "HOME": "/root"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	got := pushedEnv(&wasmv3.EnvironmentVariables{
		KeyValues:   map[string]string{"SLUICE_TELEMETRY_TOKEN": "t"},
		HostEnvKeys: []string{"GOGC", "MISSING"},
	}, lookup)
	if want := map[string]string{"SLUICE_TELEMETRY_TOKEN": "t", "GOGC": "200"}; !maps.Equal(got, want) {
		t.Fatalf("env %v, want %v", got, want)
	}
	if got := pushedEnv(nil, lookup); len(got) != 0 {
		t.Fatalf("no environment_variables: %v", got)
	}
}

func TestParseVMEnv(t *testing.T) {
	lookup := func(k string) (string, bool) {
		if k == "FROM_HOST" {
			return "h", true
		}
		return "", false
	}
	env, err := parseVMEnv([]string{"A=1", "B=x=y", "FROM_HOST", "EMPTY="}, lookup)
	if want := map[string]string{"A": "1", "B": "x=y", "FROM_HOST": "h", "EMPTY": ""}; err != nil || !maps.Equal(env, want) {
		t.Fatalf("%v %v", env, err)
	}
	for _, bad := range []string{"NOT_SET", "1A=2", "=v", "A-B=1"} {
		if _, err := parseVMEnv([]string{bad}, lookup); err == nil || !strings.Contains(err.Error(), "-vm-env") {
			t.Errorf("%q: err %v", bad, err)
		}
	}
	t.Setenv("SLUICE_VM_ENV", "X=1,Y=2")
	o, err := parseOptions(nil)
	if err != nil || !maps.Equal(o.VMEnv, map[string]string{"X": "1", "Y": "2"}) {
		t.Fatalf("SLUICE_VM_ENV: %v %v", o.VMEnv, err)
	}
	if o, err := parseOptions([]string{"-vm-env", "Z=3"}); err != nil || !maps.Equal(o.VMEnv, map[string]string{"Z": "3"}) {
		t.Fatalf("-vm-env replaces SLUICE_VM_ENV: %v %v", o.VMEnv, err)
	}
}
