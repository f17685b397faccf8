package main

import (
	"context"
	"io"
	"strings"
	"testing"

	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/admin/xds"
)

// The plugin reports FNV-1a 64 of the configuration bytes Envoy hands it;
// the admin maps that hash to a version by hashing the version's JSON. They
// agree only if admin/xds pushes the version's JSON byte for byte: check it
// on the resource xds builds, unpacked as Envoy unpacks it.
func TestConfigHashOfPushedBytes(t *testing.T) {
	v := policies.Version{Number: 4, JSON: []byte(`{"mode":"enforce","reject_status":429,"policies":[{"name":"default","rules":[]}],"x":"é \u2028"}`)}
	idx := telemetry.NewVersionIndex(nil, nil)
	srv := xds.NewServer(nil, xds.Options{})
	if err := idx.Publisher(srv).Publish(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	res, err := xds.Resource(xds.DefaultResourceName, "/x.wasm", xds.VMEnv{}, v.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var filter wasmfilter.Wasm
	if err := res.GetTypedConfig().UnmarshalTo(&filter); err != nil {
		t.Fatal(err)
	}
	var sv wrapperspb.StringValue
	if err := filter.GetConfig().GetConfiguration().UnmarshalTo(&sv); err != nil {
		t.Fatal(err)
	}
	pushed := []byte(sv.GetValue())
	if string(pushed) != string(v.JSON) {
		t.Fatalf("xds pushes other bytes than the version's JSON:\n%s\n%s", pushed, v.JSON)
	}
	if got, ok := idx.Lookup(telemetry.ConfigHash(pushed)); !ok || got != 4 {
		t.Errorf("the hash of the pushed bytes maps to v%d %v, want v4", got, ok)
	}
	if srv.Published() != 4 {
		t.Errorf("the index's publisher did not pass the version on to xds")
	}
}

func TestTelemetryFlags(t *testing.T) {
	for _, k := range []string{"SLUICE_TELEMETRY_TOKEN", "SLUICE_METRICS_LISTEN", "SLUICE_ADMIN_TOKEN"} {
		t.Setenv(k, "")
	}
	o, err := parseOptions([]string{"-telemetry-token", "telemetry-token-0123456789", "-metrics-listen", "127.0.0.1:9090"}, io.Discard)
	if err != nil || o.TelemetryToken != "telemetry-token-0123456789" || o.MetricsListen != "127.0.0.1:9090" {
		t.Fatalf("%+v %v", o, err)
	}
	t.Setenv("SLUICE_TELEMETRY_TOKEN", "from-the-environment-0000")
	if o, _ := parseOptions(nil, io.Discard); o.TelemetryToken != "from-the-environment-0000" {
		t.Errorf("env SLUICE_TELEMETRY_TOKEN ignored")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-telemetry-token", "short"}, "-telemetry-token"},
		{[]string{"-token", "same-token-0123456789", "-telemetry-token", "same-token-0123456789"}, "must differ"},
	} {
		if _, err := parseOptions(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v", c.args, err)
		}
	}
}

// With resets, the nodes get a version's (or a trial's) JSON with the
// resets appended: the hash of those bytes must still name the version it
// was built from, or the dashboard would show every node behind and the
// alert on nodes not running the policy would fire after each reset.
func TestConfigHashOfBytesWithResetsNamesTheVersion(t *testing.T) {
	ctx := context.Background()
	v := policies.Version{Number: 4, JSON: []byte(`{"rules":[{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":3}}]}`)}
	idx := telemetry.NewVersionIndex(nil, nil)
	srv := xds.NewServer(nil, xds.Options{Pushed: idx.Add})
	if err := idx.Publisher(srv).Publish(ctx, v); err != nil {
		t.Fatal(err)
	}
	rs := []xds.Reset{{ID: "r1", Rule: "per-key", Key: "alice"}}
	if err := srv.SetResets(ctx, rs); err != nil {
		t.Fatal(err)
	}
	composed, _ := xds.Compose(v.JSON, rs)
	if string(composed) == string(v.JSON) {
		t.Fatal("the resets were not composed into the configuration")
	}
	if got, ok := idx.Lookup(telemetry.ConfigHash(composed)); !ok || got != 4 {
		t.Errorf("the hash of the version with resets maps to v%d %v, want v4", got, ok)
	}
	trialJSON := strings.Replace(string(v.JSON), `"burst":3`, `"burst":2`, 1)
	if err := srv.PushTrial(ctx, 4, []byte(trialJSON)); err != nil {
		t.Fatal(err)
	}
	trialComposed, _ := xds.Compose([]byte(trialJSON), rs)
	if got, ok := idx.Lookup(telemetry.ConfigHash(trialComposed)); !ok || got != 4 {
		t.Errorf("the hash of the trial with resets maps to v%d %v, want v4", got, ok)
	}
}
