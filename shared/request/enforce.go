package request

import "github.com/sluice-rl/sluice/shared/state"

// Enforced reports whether a rule with "enforce_percent" percent refuses
// identity (a composite as AppendComposite builds it) when it is over the
// limit; the identities it does not enforce on are treated as in shadow
// mode.
//
// The choice is a hash of the identity alone, not seeded per deployment:
// every Envoy and the admin's simulator choose the same identities, a
// client is enforced on every request or on none (a client that retries
// cannot slip through, as it could if each request were drawn at random),
// and raising the percentage only adds identities. Rules with the same
// limit keys and percentage enforce on the same clients.
func Enforced(identity string, percent float64) bool {
	if percent >= 100 {
		return true
	}
	return float64(rolloutPoint(identity)) < percent*rolloutScale/100
}

// rolloutScale is how many points the identities are spread over: a
// percentage is honoured to 1/10,000 of a percent.
const rolloutScale = 1_000_000

// rolloutPoint places identity in [0, rolloutScale). FNV-1a alone spreads
// similar identities (sequential keys, neighbouring addresses) poorly in
// its low bits, so its hash is finalized (splitmix64's mixer) after a salt
// that keeps the choice independent of Retry-After's jitter, which hashes
// the identity too.
func rolloutPoint(identity string) uint64 {
	h := state.FNV1a64(identity) ^ 0x9e3779b97f4a7c15
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	h ^= h >> 31
	return h % rolloutScale
}
