package request

import (
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Match is one condition of a rule's "match", prepared for testing request
// values: the filter tests each request with it, and so does the simulator.
type Match struct {
	Value  string
	Prefix bool
}

// CompileMatch prepares a parsed matcher. A host is compared lower-cased,
// as the request's host is lower-cased when read.
func CompileMatch(m policy.Matcher) Match {
	v := m.Value
	if m.Source.Kind == policy.SourceHost {
		v = strings.ToLower(v)
	}
	return Match{Value: v, Prefix: m.Prefix}
}

// Holds reports whether the request's value v (present and not empty)
// satisfies the condition.
func (m Match) Holds(v string) bool {
	if m.Prefix {
		return strings.HasPrefix(v, m.Value)
	}
	return v == m.Value
}
