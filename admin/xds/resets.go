package xds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Compose returns config with the resets it accepts appended as its last
// top-level member, and the suffix of the resource version that names
// them ("+resets.<hash>"). A reset whose rule the configuration no longer
// has (or no longer keeps state in, or with another number of limit keys,
// or for a reset of every identity in exact storage, which the filter
// cannot list) is left out, so an old reset never makes the Envoys refuse
// a version.
// Without resets to carry, config is returned as it is, with no suffix.
func Compose(config []byte, resets []Reset) ([]byte, string) {
	rs := slices.Clone(resets)
	for len(rs) > 0 {
		list, _ := json.Marshal(rs) // strings only: cannot fail
		composed, ok := appendResets(config, list)
		if !ok {
			break
		}
		refused, err := refusedResets(composed)
		if err != nil {
			break // refused for another reason: push the configuration as it is
		}
		if len(refused) == 0 {
			return composed, resetsSuffix(list)
		}
		rs = slices.DeleteFunc(rs, func(r Reset) bool { return refused[r.ID] })
	}
	return config, ""
}

// appendResets writes `,"resets":<list>` before the closing brace of the
// JSON object config; false if config does not end with one.
func appendResets(config, list []byte) ([]byte, bool) {
	const space = " \t\r\n"
	body, ok := bytes.CutSuffix(bytes.TrimRight(config, space), []byte("}"))
	if !ok {
		return nil, false
	}
	out := make([]byte, 0, len(body)+len(list)+12)
	out = append(out, body...)
	if inner := bytes.TrimRight(body, space); len(inner) > 0 && inner[len(inner)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, `"resets":`...)
	out = append(out, list...)
	return append(out, '}'), true
}

// refusedResets parses a composed configuration and returns the IDs of
// the resets it refuses; an error when something else is refused.
func refusedResets(composed []byte) (map[string]bool, error) {
	_, err := policy.Parse(composed)
	if err == nil {
		return nil, nil
	}
	var es policy.Errors
	if !errors.As(err, &es) {
		return nil, err
	}
	var list struct {
		Resets []Reset `json:"resets"`
	}
	if err := json.Unmarshal(composed, &list); err != nil {
		return nil, err
	}
	refused := map[string]bool{}
	for _, e := range es {
		i, ok := resetIndex(e.Path)
		if !ok || i >= len(list.Resets) {
			return nil, err
		}
		refused[list.Resets[i].ID] = true
	}
	return refused, nil
}

// resetIndex reads N from an error path "resets[N]..." .
func resetIndex(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, "resets[")
	if !ok {
		return 0, false
	}
	n, _, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(n)
	return i, ok && err == nil
}

// resetsSuffix names a set of resets in the resource version: the version
// must change for the Envoys to be sent the configuration again, and it
// depends on the resets alone, so replicas sharing the database push the
// same version.
func resetsSuffix(list []byte) string {
	h := fnv.New32a()
	h.Write(list)
	return fmt.Sprintf("+resets.%08x", h.Sum32())
}

// SetResets makes rs the resets carried by every configuration pushed
// from now on, and pushes the current configuration (a version's or a
// trial's) again with them at once. Before the first Publish it only
// remembers them.
func (s *Server) SetResets(ctx context.Context, rs []Reset) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(rs, s.resets) {
		return nil
	}
	s.resets = slices.Clone(rs)
	switch {
	case s.published == 0:
		return nil
	case s.trial:
		return s.setSnapshot(ctx, s.published, TrialVersion(s.published, s.trialRev), s.trialJSON)
	}
	return s.setSnapshot(ctx, s.published, strconv.FormatInt(s.published, 10), s.json)
}
