package bench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// BenchmarkTrial is the cost of a shadow trial on an allowed request whose
// trial rules do not match. "vs-empty" runs the configuration without and
// with the trial's rules against the empty plugin; "vs-no-trial" runs the
// plugin with the trial against the same plugin without it in one
// interleaved run, so its x-floor is the trial's own factor. The trial
// rules match on a header the current policy does not read (x-plan: one
// more header read per request) or on one it reads already (x-api-key).
// "marked" is a trial rule that marks the upstream request, as shadow
// rules do by default (one more host call per request: the shadow header
// is removed). The request has 5 headers (Headers); the "req=browser"
// cases send the 15 of a realistic request instead (BrowserHeaders), and
// "req=browser+plan" those and x-plan: free, a value the trial's rules do
// not match (its request is read whole).
func BenchmarkTrial(b *testing.B) {
	req := same(Headers("x-api-key", "k1"))
	browser := same(&wasmhost.Request{Headers: BrowserHeaders("k1", 0), Properties: Headers().Properties})
	plan := same(&wasmhost.Request{Headers: append(BrowserHeaders("k1", 0), [2]string{"x-plan", "free"}), Properties: Headers().Properties})
	for _, n := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("vs-empty/trial-rules=%d", n), func(b *testing.B) {
			Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: TrialConfig(n, "header:x-plan"), Request: req, Rejected: &no})
		})
	}
	for _, match := range []string{"header:x-plan", "header:x-api-key"} {
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("vs-no-trial/match=%s/trial-rules=%d", strings.TrimPrefix(match, "header:"), n), func(b *testing.B) {
				Run(b, Case{Wasm: pluginWasm(b), Floor: pluginWasm(b), Config: TrialConfig(n, match), FloorConfig: TrialConfig(0, match),
					Request: req, Rejected: &no})
			})
		}
	}
	b.Run("vs-no-trial/match=x-plan/marked/trial-rules=1", func(b *testing.B) {
		marked := strings.Replace(TrialConfig(1, "header:x-plan"), `"shadow_mark": false, `, "", 1)
		Run(b, Case{Wasm: pluginWasm(b), Floor: pluginWasm(b), Config: marked, FloorConfig: TrialConfig(0, ""), Request: req, Rejected: &no})
	})
	b.Run("vs-empty/trial-rules=0/req=browser", func(b *testing.B) {
		Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: TrialConfig(0, ""), Request: browser, Rejected: &no})
	})
	for _, n := range []int{1, 4} {
		for _, r := range []struct {
			name string
			req  func(int, int) *wasmhost.Request
		}{{"browser", browser}, {"browser+plan", plan}} {
			b.Run(fmt.Sprintf("vs-no-trial/match=x-plan/trial-rules=%d/req=%s", n, r.name), func(b *testing.B) {
				Run(b, Case{Wasm: pluginWasm(b), Floor: pluginWasm(b), Config: TrialConfig(n, "header:x-plan"), FloorConfig: TrialConfig(0, ""),
					Request: r.req, Rejected: &no})
			})
		}
	}
}
