package policy

import (
	"strings"
	"testing"
)

func TestNetworkSourcesParseAndRoundTrip(t *testing.T) {
	for in, want := range map[string]string{
		"ip:network": "ip:network", "ip:network:24:64": "ip:network", "ip:network:16:48": "ip:network:16:48",
		"ip:network:032:0128": "ip:network:32:128",
	} {
		k, ok := ParseSource(in)
		if !ok || k.Kind != SourceIPNetwork || k.String() != want {
			t.Errorf("%s: %+v %v, String %q; want %q", in, k, ok, k.String(), want)
		}
		if again, _ := ParseSource(k.String()); again != k {
			t.Errorf("%s: %q parses to %+v, not %+v", in, k.String(), again, k)
		}
	}
	if v4, v6 := (KeySource{Kind: SourceIPNetwork, Name: "16:48"}).NetworkBits(); v4 != 16 || v6 != 48 {
		t.Errorf("NetworkBits %d %d", v4, v6)
	}
}

func TestNetworkSourceErrorsSayWhatToWrite(t *testing.T) {
	for in, want := range map[string]string{
		"ip:network:24":     `"ip:network:<IPv4 bits>:<IPv6 bits>"`,
		"ip:network:0:64":   "IPv4 prefix length of 0; it must be 1 to 32",
		"ip:network:24:129": "IPv6 prefix length of 129; it must be 1 to 128",
		"ip:network:a:b":    `e.g. "ip:network:24:64"`,
		"ip:net":            `or "ip:network" (its network`,
	} {
		_, err := Parse([]byte(ruleWith(`"name":"r","limit_keys":["` + in + `"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}`)))
		if err == nil || !strings.Contains(err.Error(), "rules[0].limit_keys[0]") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	_, err := Parse([]byte(ruleWith(`"name":"r","match":{"ip:network":"203.0.113.0/24"},"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}`)))
	if err == nil || !strings.Contains(err.Error(), `rules[0].match["ip:network"]: a network is a key only`) {
		t.Errorf("a condition on a network: %v", err)
	}
}
