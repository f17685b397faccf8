package request

import (
	"github.com/sluice-rl/sluice/shared/policy"
)

// Match is one condition of a rule's "match", prepared for testing request
// values: the filter tests each request with it, and so does the simulator.
// The condition's regexes were compiled once by policy.Parse, and host
// operands lower-cased there, as the request's host is when read.
type Match struct {
	cond *policy.Condition
}

// CompileMatch prepares a parsed matcher. m must outlive the Match (it is
// part of the parsed configuration).
func CompileMatch(m *policy.Matcher) Match {
	return Match{cond: &m.Cond}
}

// Holds reports whether the request's value v (ok: the value is present
// and not empty) satisfies the condition.
func (m Match) Holds(v string, ok bool) bool {
	return m.cond.Holds(v, ok)
}
