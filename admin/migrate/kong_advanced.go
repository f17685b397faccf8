package migrate

// Kong's rate-limiting-advanced plugin (Kong Gateway Enterprise): any
// number of windows of any length, each fixed or sliding, in one plugin.
// Kong runs it apart from rate-limiting (a request may meet both), with
// the same precedence of scopes; so its windows get policies of their own,
// named advanced-<seconds>s, built as the rate-limiting periods' are.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// kongAdvanced is the plugin's name.
const kongAdvanced = "rate-limiting-advanced"

// kongLimiter: the plugins converted.
func kongLimiter(name string) bool { return name == "rate-limiting" || name == kongAdvanced }

// advancedPeriod is the period key of an advanced window of n seconds.
func advancedPeriod(seconds int) string { return "advanced-" + strconv.Itoa(seconds) + "s" }

// isAdvancedPeriod reports whether period is an advanced window's.
func isAdvancedPeriod(period string) bool { return strings.HasPrefix(period, "advanced-") }

// kongAdvancedIdentifiers are the identifier values converted, with the
// rate-limiting plugin's limit_by of the same meaning.
var kongAdvancedIdentifiers = []string{"consumer", "credential", "ip", "service", "header", "path", "route"}

// readAdvanced reads a rate-limiting-advanced config: every field Kong
// knows, null being unset as in decK's dumps; an unknown field is an
// error, and what Sluice cannot do is refused naming the field.
func (k *kongConv) readAdvanced(path string, n *yaml.Node) (kongLimit, error) {
	lim := kongLimit{limits: map[string]int{}, windows: map[string]int{}, advanced: true, sliding: true,
		limitBy: "consumer", policy: "local", code: 429, message: "API rate limit exceeded"}
	var limits, sizes []float64
	var limitsAt, sizesAt string
	if err := kongEachField(path, kongDeref(n), func(field, name string, v *yaml.Node) (err error) {
		switch name {
		case "limit":
			limits, err = kongNumbers(field, v)
			limitsAt = field
		case "window_size":
			sizes, err = kongNumbers(field, v)
			sizesAt = field
		default:
			err = k.advancedField(&lim, field, name, v)
		}
		return err
	}); err != nil {
		return lim, err
	}
	switch {
	case len(limits) == 0 || len(sizes) == 0:
		return lim, fmt.Errorf("%s: limit and window_size are required, one number each per window", path)
	case len(limits) != len(sizes):
		return lim, fmt.Errorf("%s: %d limits for %d window sizes; Kong pairs them by position", limitsAt, len(limits), len(sizes))
	case lim.limitBy == "header" && lim.header == "":
		return lim, fmt.Errorf("%s.header_name: required with identifier header", path)
	case lim.limitBy == "path" && lim.path == "":
		return lim, fmt.Errorf("%s.path: required with identifier path", path)
	case lim.throttle != nil && lim.global():
		return lim, fmt.Errorf("%s: with strategy %s: Sluice holds requests only in each Envoy process (a rule counted across the fleet cannot hold them); set strategy local, or turn throttling off", lim.throttle.field, lim.policy)
	}
	for i, s := range sizes {
		if s != math.Trunc(s) || s < 1 || s > 31536000 {
			return lim, fmt.Errorf("%s[%d]: %v; want whole seconds from 1 to a year", sizesAt, i, s)
		}
		if limits[i] <= 0 || limits[i] > 1e12 {
			return lim, fmt.Errorf("%s[%d]: %v; want more than 0 and at most 1e12", limitsAt, i, limits[i])
		}
		p := advancedPeriod(int(s))
		if _, dup := lim.limits[p]; dup {
			return lim, fmt.Errorf("%s[%d]: %v seconds twice", sizesAt, i, s)
		}
		lim.windows[p] = int(s)
		lim.limits[p] = int(math.Ceil(limits[i]))
		if limits[i] != math.Ceil(limits[i]) {
			k.note("%s[%d]: %v is %d whole requests, as Kong counts", limitsAt, i, limits[i], lim.limits[p])
		}
	}
	switch {
	case lim.throttle != nil:
		k.noteOnce("rate-limiting-advanced's throttled windows become token_bucket rules (limit per window as the burst, refilled over the window) with max_delay_ms: a request over the limit is held until its turn, at most interval x retry_times and no longer than the refill of queue_limit requests takes, where Kong retries it every interval; the others are refused with 429 at once")
	case lim.sliding && !lim.noPenalty:
		k.noteOnce("rate-limiting-advanced's sliding windows become sliding_window rules, which weigh the previous window's count the same way; Kong also counts the requests it rejects (disable_penalty: false, its default), Sluice never does, so a client that keeps sending over the limit gets through again sooner than under Kong (a token_bucket rule of the same key with block_seconds keeps such a client out for a time)")
	case lim.sliding:
		k.noteOnce("rate-limiting-advanced's sliding windows become sliding_window rules, which weigh the previous window's count the same way and, as Kong's with disable_penalty: true, count only the requests they admit")
	}
	return lim, nil
}

// advancedField reads one field of a rate-limiting-advanced config other
// than limit and window_size.
func (k *kongConv) advancedField(lim *kongLimit, field, name string, v *yaml.Node) error {
	var err error
	switch name {
	case "window_type":
		var t string
		if t, err = kongString(field, v); err == nil && t != "sliding" && t != "fixed" {
			err = fmt.Errorf("%s: %q; want sliding or fixed", field, t)
		}
		lim.sliding = t == "sliding"
	case "identifier":
		if lim.limitBy, err = kongString(field, v); err == nil && !slices.Contains(kongAdvancedIdentifiers, lim.limitBy) {
			err = fmt.Errorf("%s: %q is not converted; want one of %s (a consumer group's or a compound identifier: write the rule by hand)",
				field, lim.limitBy, strings.Join(kongAdvancedIdentifiers, ", "))
		}
	case "strategy":
		if lim.policy, err = kongString(field, v); err == nil && lim.policy != "local" && lim.policy != "redis" && lim.policy != "cluster" {
			err = fmt.Errorf("%s: %q; want local, redis or cluster", field, lim.policy)
		}
	case "header_name", "path", "hide_client_headers", "error_code", "error_message":
		return k.limitField(lim, field, name, v)
	case "disable_penalty":
		lim.noPenalty, err = kongBool(field, v)
	case "retry_after_jitter_max":
		var f float64
		if f, err = kongNumber(field, v); err == nil && f > 0 {
			k.noteOnce("retry_after_jitter_max is not converted: Sluice spreads refused clients itself, adding 0 to 50% of the wait to each client's Retry-After (the same share for a client every time), where Kong adds a random 0 to retry_after_jitter_max seconds")
		}
	case "sync_rate":
		_, err = kongNumber(field, v)
	case "namespace", "dictionary_name", "lock_dictionary_name":
		_, err = kongString(field, v)
	case "enforce_consumer_groups":
		var on bool
		if on, err = kongBool(field, v); err == nil && on {
			err = fmt.Errorf("%s: consumer groups' own limits are not converted; write their rules by hand, matching the groups' consumers", field)
		}
	case "consumer_groups":
		if v.Kind != yaml.SequenceNode {
			err = fmt.Errorf("%s: want a list of consumer group names", field)
		}
	case "compound_identifier":
		if v.Kind != yaml.SequenceNode || len(v.Content) > 0 {
			err = fmt.Errorf("%s: a compound identifier is not converted; write the rule by hand with several limit_keys", field)
		}
	case "throttling":
		lim.throttle, err = kongThrottling(field, v)
	default:
		if !kongRedisFields[name] {
			return fmt.Errorf("%s: not a field of Kong's rate-limiting-advanced plugin; remove it or correct its name", field)
		}
	}
	return err
}

// kongThrottle is an enabled throttling: Kong queues a request over the
// limit (at most queueLimit of them) and retries it every interval
// seconds, at most retries times, before it refuses it.
type kongThrottle struct {
	field                         string
	interval, retries, queueLimit float64
}

// kongThrottling reads throttling: nil when it is not enabled. Kong's
// defaults: interval 5 s, retry_times 3, queue_limit 5.
func kongThrottling(field string, v *yaml.Node) (*kongThrottle, error) {
	if v.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping", field)
	}
	t := &kongThrottle{field: field, interval: 5, retries: 3, queueLimit: 5}
	on := false
	for i := 0; i+1 < len(v.Content); i += 2 {
		name, fv := v.Content[i].Value, kongDeref(v.Content[i+1])
		var err error
		switch name {
		case "enabled":
			on, err = kongBool(field+".enabled", fv)
		case "interval":
			t.interval, err = kongCount(field+"."+name, fv)
		case "retry_times":
			t.retries, err = kongCount(field+"."+name, fv)
		case "queue_limit":
			t.queueLimit, err = kongCount(field+"."+name, fv)
		default:
			err = fmt.Errorf("%s.%s: not a field of Kong's throttling; remove it or correct its name", field, name)
		}
		if err != nil {
			return nil, err
		}
	}
	if !on {
		return nil, nil
	}
	return t, nil
}

// kongCount reads a whole number from 1 to a million.
func kongCount(field string, v *yaml.Node) (float64, error) {
	n, err := kongNumber(field, v)
	if err == nil && (n < 1 || n > 1e6 || n != math.Trunc(n)) {
		err = fmt.Errorf("%s: %v; want a whole number from 1 to 1000000", field, n)
	}
	return n, err
}

// maxDelayMS is how long Sluice may hold a request of a throttled window
// of limit requests per window seconds: Kong's longest wait (interval x
// retry_times), and no longer than the refill of queue_limit requests
// takes (a token bucket holds at most rate x max_delay_ms requests' worth,
// Kong's queue at most queue_limit), within Sluice's 60 s.
func (t *kongThrottle) maxDelayMS(limit, window int) int {
	wait := min(t.interval*t.retries, t.queueLimit*float64(window)/float64(limit))
	return int(max(1, min(math.Floor(wait*1000), policy.MaxDelayMS)))
}

// kongNumbers reads a list of numbers.
func kongNumbers(field string, v *yaml.Node) ([]float64, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s: want a list of numbers", field)
	}
	out := make([]float64, 0, len(v.Content))
	for i, e := range v.Content {
		f, err := kongNumber(fmt.Sprintf("%s[%d]", field, i), kongDeref(e))
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// readPluginLimit reads the config of a rate-limiting or a
// rate-limiting-advanced plugin.
func (k *kongConv) readPluginLimit(name, path string, n *yaml.Node) (kongLimit, error) {
	if name == kongAdvanced {
		return k.readAdvanced(path, n)
	}
	return k.readLimit(path, n)
}

// periods are the policies' periods: Kong's periods the rate-limiting
// plugins set, shortest first, then the advanced windows, shortest first.
func (k *kongConv) periods() []string {
	out := slices.Clone(kongPeriods)
	seconds := map[string]int{}
	for _, rl := range k.limits {
		for p, s := range rl.lim.windows {
			seconds[p] = s
		}
	}
	adv := make([]string, 0, len(seconds))
	for p := range seconds {
		adv = append(adv, p)
	}
	slices.SortFunc(adv, func(a, b string) int { return seconds[a] - seconds[b] })
	return append(out, adv...)
}

// inPeriod reports whether rl takes part in period's policy: a
// rate-limiting plugin in Kong's periods, an advanced one in the advanced
// windows (Kong runs the two plugins apart).
func inPeriod(rl *kongRL, period string) bool { return rl.lim.advanced == isAdvancedPeriod(period) }
