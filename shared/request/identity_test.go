package request

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

func TestDisplayIdentityMasksTheSourcesThatMayBeSecrets(t *testing.T) {
	src := func(s string) policy.KeySource {
		k, ok := policy.ParseSource(s)
		if !ok {
			t.Fatalf("source %q", s)
		}
		return k
	}
	id := func(comps ...string) string {
		out, _ := AppendComposite(nil, nil, comps)
		return string(out)
	}
	for _, tc := range []struct {
		keys  []string
		comps []string
		clear bool
		want  string
	}{
		{[]string{"cookie:sid"}, []string{"s-4f1c2a9e77"}, false, "cookie:sid=s-4f…#"},
		{[]string{"header:x-api-key", "ip:address"}, []string{"sk_live_123456", "10.0.0.1"}, false, "header:x-api-key=sk_l…#"},
		{[]string{"ip:address", "path"}, []string{"10.0.0.1", "/api"}, false, "ip:address=10.0.0.1|path=/api"},
		{[]string{"cookie:sid"}, []string{"s-4f1c2a9e77"}, true, "cookie:sid=s-4f1c2a9e77"},
	} {
		keys := make([]policy.KeySource, len(tc.keys))
		for i, k := range tc.keys {
			keys[i] = src(k)
		}
		got := DisplayIdentity(keys, tc.clear, id(tc.comps...))
		if !strings.HasPrefix(got, tc.want) || !tc.clear && strings.Contains(got, tc.comps[0]) && tc.keys[0] != "ip:address" {
			t.Errorf("DisplayIdentity(%v, clear %v, %v) = %q, want %q...", tc.keys, tc.clear, tc.comps, got, tc.want)
		}
	}
}
