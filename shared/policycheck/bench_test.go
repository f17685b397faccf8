package policycheck_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// BenchmarkRunTheDemoTests runs the demo policy's test file, per request
// decided: "suite" as `policy test` runs it, "simulator" the same
// requests through simulate.Run alone (with the state carried the same
// way), so suite/simulator is what the tests add to the decisions.
func BenchmarkRunTheDemoTests(b *testing.B) {
	cfg, err := parseConfigB(readFileB(b, demoConfig))
	if err != nil {
		b.Fatal(err)
	}
	suite, err := policycheck.Parse([]byte(readFileB(b, demoTests)))
	if err != nil {
		b.Fatal(err)
	}
	type sent struct {
		test int
		at   time.Time
		req  simulate.Request
	}
	var all []sent
	policycheck.Run(cfg, suite, policycheck.Options{Observe: func(s policycheck.Sent) {
		all = append(all, sent{s.Test, s.At, s.Request})
	}})
	b.Run("suite", func(b *testing.B) {
		for b.Loop() {
			if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 {
				b.Fatal(rep.Text(false))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(all)), "ns/request")
	})
	b.Run("simulator", func(b *testing.B) {
		type key struct{ rule, id string }
		for b.Loop() {
			var states map[key]simulate.State
			lookup := func(r *policy.Rule, id string) (simulate.State, bool) {
				st, ok := states[key{r.Name, id}]
				return st, ok
			}
			test := -1
			for _, s := range all {
				if s.test != test {
					states, test = map[key]simulate.State{}, s.test
				}
				res := simulate.Run(cfg, s.req, simulate.Options{Now: limiter.Seconds(s.at.UnixNano()), Lookup: lookup})
				for _, st := range res.Stores() {
					states[key{st.Rule, st.Identity}] = st.State
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(all)), "ns/request")
	})
}

// BenchmarkParseTheDemoTests reads the demo policy's test file.
func BenchmarkParseTheDemoTests(b *testing.B) {
	doc := []byte(readFileB(b, demoTests))
	for b.Loop() {
		if _, err := policycheck.Parse(doc); err != nil {
			b.Fatal(err)
		}
	}
}
