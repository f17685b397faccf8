package migrate

// Token costs counted when the stream is done. Envoy AI Gateway (and
// configurations written after it) limits the tokens of LLM calls with two
// rate_limits entries of the same actions: one on the request path with
// hits_addend {number: 0}, which only checks the descriptors (the service
// refuses once their counters are over the limit), and one with
// apply_on_stream_done: true, whose hits_addend format reads the call's
// token count from the dynamic metadata the AI Gateway writes when the
// answer ends. Envoy sends the second when the stream is done and limits
// nothing by its answer.
//
// A Sluice rule charged from the answer does both: it admits a request
// while the limit has something left, and charges the usage it reads from
// the answer's body itself when the answer ends. So the pair converts to
// one policy whose rules take the cost from the answer.

import (
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// entryPlan is how one rate_limits entry converts.
type entryPlan struct {
	// cost is a stream-done entry's cost source, read from the answer
	// ("response_json:usage.total_tokens").
	cost string
	// checks: a request-path entry that checks a stream-done entry's
	// descriptors; it converts with that entry, not alone.
	checks bool
}

// aiGatewayHits is a hits_addend format reading one of Envoy AI Gateway's
// token counts.
var aiGatewayHits = regexp.MustCompile(`^%DYNAMIC_METADATA\(` + regexp.QuoteMeta(aiGatewayMetadata) + `:([A-Za-z0-9_]+)\)%$`)

// planEntries pairs each apply_on_stream_done entry with the request-path
// entry of the same actions that checks its descriptors.
func planEntries(rls []routeRateLimit) ([]entryPlan, error) {
	plans := make([]entryPlan, len(rls))
	checker := map[int]int{} // request-path entry -> the stream-done entry it checks
	for i, rl := range rls {
		if !rl.ApplyOnStreamDone {
			continue
		}
		path := fmt.Sprintf("rate_limits[%d]", i)
		cost, err := streamDoneCost(path, rl.HitsAddend)
		if err != nil {
			return nil, err
		}
		j := slices.IndexFunc(rls, func(o routeRateLimit) bool {
			return !o.ApplyOnStreamDone && reflect.DeepEqual(o.Actions, rl.Actions)
		})
		if j < 0 {
			return nil, fmt.Errorf("%s.apply_on_stream_done: no rate_limits entry of the same actions checks these descriptors before a request (hits_addend {number: 0}), so Envoy counts the tokens but never refuses a request by them; add that entry, or write the rule by hand", path)
		}
		if n, ok := fixedHits(rls[j].HitsAddend); !ok || n != 0 {
			return nil, fmt.Errorf("rate_limits[%d].hits_addend: it checks %s's descriptors and counts each request too; Sluice charges a rule from the answer alone: set it to {number: 0}", j, path)
		}
		if k, dup := checker[j]; dup {
			return nil, fmt.Errorf("%s: rate_limits[%d] already checks the same descriptors for rate_limits[%d]; convert one stream-done entry per actions", path, j, k)
		}
		checker[j] = i
		plans[i].cost, plans[j].checks = cost, true
	}
	return plans, nil
}

// fixedHits reads hits_addend {number: N}: false for anything else.
func fixedHits(h any) (int, bool) {
	m, ok := h.(map[string]any)
	if !ok || len(m) != 1 {
		return 0, false
	}
	n, ok := m["number"].(int)
	return n, ok
}

// streamDoneCost is the cost source of a stream-done entry's hits_addend:
// one of Envoy AI Gateway's token counts, which Sluice reads from the
// answer's body (in the OpenAI format the AI Gateway answers in).
func streamDoneCost(path string, h any) (string, error) {
	m, ok := h.(map[string]any)
	format, isText := m["format"].(string)
	if !ok || len(m) != 1 || !isText {
		return "", fmt.Errorf("%s.hits_addend: an apply_on_stream_done entry is converted when its hits are a token count read from the answer ({format: '%%DYNAMIC_METADATA(%s:llm_total_token)%%'}); a fixed number counts requests, which Sluice counts when it admits them: remove apply_on_stream_done", path, aiGatewayMetadata)
	}
	sub := aiGatewayHits.FindStringSubmatch(format)
	if sub == nil {
		return "", fmt.Errorf("%s.hits_addend.format %q: not converted; Sluice reads Envoy AI Gateway's token counts (%%DYNAMIC_METADATA(%s:<count>)%%, the count one of %s) from the answer itself; for another cost, write the rule by hand with a cost_source read from the response", path, format, aiGatewayMetadata, aiGatewayCounts())
	}
	usage, ok := aiGatewayUsage[sub[1]]
	if !ok {
		return "", fmt.Errorf("%s.hits_addend.format %q: %s is not one of Envoy AI Gateway's token counts (%s); for a cost of your own, write the rule by hand with a cost_source read from the response", path, format, sub[1], aiGatewayCounts())
	}
	return "response_json:" + usage, nil
}

// aiGatewayCounts lists the AI Gateway's token counts, for errors.
func aiGatewayCounts() string { return strings.Join(slices.Sorted(maps.Keys(aiGatewayUsage)), ", ") }

// A limit charged from the answer, converted from another limiter's limit
// per unit: Sluice's windows take request costs only, so a unit shorter
// than an hour is a token bucket of the limit refilled over the unit, a
// longer one a calendar quota (the Envoy Gateway converter writes the same).
const answerQuotaFromSeconds = 3600

const (
	noteAnswerBucket = "a limit per second or minute charged from the answer is a token bucket of the limit, refilled over the unit (Sluice's windows take request costs only)"
	noteAnswerWeek   = "a weekly limit charged from the answer is a quota of calendar weeks from Monday (UTC); the rate limit service's weeks start on the epoch's Thursday"
)

// answerLimit sets the limit of rule r, charged from the answer (cost),
// for the descriptor's rate_limit rl: Sluice's windows take request costs
// only, so a limit per second or minute is a token bucket of the limit
// refilled over the unit, and a longer one a calendar quota (UTC).
func (c *converter) answerLimit(path string, r *outRule, rl *rateLimit, cost string) error {
	if rl.UnitMultiplier != nil && *rl.UnitMultiplier != 1 {
		return fmt.Errorf("%s: rule %s: unit_multiplier on descriptors charged when the stream is done is not converted (a limit charged from the answer is a token bucket or a calendar quota); write the rule by hand", path, r.Name)
	}
	unit := strings.ToLower(rl.Unit)
	n, secs := int64(*rl.RequestsPerUnit), windowSeconds[unit]
	c.noteOnce(aiGatewayCostNote(cost))
	withCost := egCost{CostSource: cost}
	if secs < answerQuotaFromSeconds {
		r.Algorithm, r.AlgorithmConfig = policy.AlgorithmTokenBucket, egBucket{TokensPerSecond: perSecond(n, secs), Burst: n, egCost: withCost}
		c.noteOnce(noteAnswerBucket)
		return nil
	}
	r.Algorithm, r.AlgorithmConfig = policy.AlgorithmQuota, egQuota{Limit: n, Period: unit, egCost: withCost}
	switch unit {
	case "week":
		c.noteOnce(noteAnswerWeek)
	case "month", "year":
		c.noteOnce(fmt.Sprintf("a limit per %s charged from the answer is a quota of the calendar %s (UTC); the rate limit service's %s is %d days from the Unix epoch", unit, unit, unit, secs/86400))
	}
	return nil
}

// aiGatewayCostNote says how a rule reads the token count Envoy AI Gateway
// would have written (costSource, response_json:<path>).
func aiGatewayCostNote(costSource string) string {
	return fmt.Sprintf("Envoy AI Gateway's token count is read by Sluice from the answer's body itself (%s, in the OpenAI format the AI Gateway answers in): the rule admits a request while tokens are left and charges the usage when the answer ends; an answer reporting none (an error, a stream without usage) costs 1 (default_cost)", costSource)
}
