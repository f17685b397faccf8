package main

import (
	"maps"
	"net/url"
	"strings"
	"testing"

	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"

	"github.com/sluice-rl/sluice/admin/xds"
)

// tokenEnvConfig is e2eConfig with its token in the VM environment.
var tokenEnvConfig = strings.Replace(e2eConfig, `"token": "`+e2eTelToken+`"`, `"token_env": "SLUICE_TELEMETRY_TOKEN"`, 1)

// TestXDSPushedVMEnvCarriesTheTelemetryToken: the admin pushes the
// telemetry token in vm_config's environment and a policy with token_env;
// the gateway starts VMs with that environment (as Envoy does for a new
// vm_config), ACKs, and its reports reach the real admin with the token.
// Pushing again with the same vm_config keeps those VMs and their buckets.
func TestXDSPushedVMEnvCarriesTheTelemetryToken(t *testing.T) {
	if tokenEnvConfig == e2eConfig {
		t.Fatal("the test policy does not use token_env")
	}
	srv, state := adminServer(t)
	addr := freeAddr(t)
	adm := startAdminWith(t, addr, xds.Options{WasmPath: "/x.wasm", VMEnv: xds.VMEnv{
		KeyValues: map[string]string{"SLUICE_TELEMETRY_TOKEN": e2eTelToken},
	}})
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
	if env := gw.cur.Load().env; env["SLUICE_TELEMETRY_TOKEN"] != e2eTelToken {
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
	waitFor(t, "a report accepted by the admin", func() bool { return state.Stats().Accepted > 0 })

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
	waitFor(t, "the NACK", func() bool { return adm.node("gw-test").NackedVersion == "1" })
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
