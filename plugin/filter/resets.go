package filter

import (
	"bytes"
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// Resets ("resets", written by the admin into the configuration it
// pushes): identities whose stored state a rule forgets, so that their
// next request starts as a new identity's would. The configuration is the
// only channel from the admin to every Envoy's shared data, and every
// later push carries a reset again for a while, to Envoys that missed the
// first; so each Envoy process applies a reset once, by its id.
//
// appliedResetsKey holds the ids of the resets applied in this process,
// one per line, written with compare-and-swap: the VM (worker) that adds
// an id to it is the one that applies that reset, and the others, which
// load the same configuration at about the same time, find it there. The
// list keeps only the ids of the configuration being loaded, so it stays
// as small as the admin's list (policy.MaxResets ids at most).
//
// Forgetting is one conditional write of the identity's state (for a
// global rule, its lease pool; the admin has the rate limit service
// forget the rest): in
// bounded storage its way of the group becomes free (a new identity's
// state, whatever the algorithm), in exact storage its key an empty value,
// which the readers take for a new identity's. An identity that holds no
// state, or shares its group's overflow state with others, has nothing
// of its own to forget. A reset that fails (shared data errors, or
// compare-and-swap lost maxAttempts times) is logged and counted, and
// not retried: its id is claimed, and an operator resets again.
const appliedResetsKey = "sluice:resets"

// resetOutcome is what applying one reset did.
type resetOutcome uint8

const (
	resetForgot  resetOutcome = iota // the identity's state was forgotten
	resetNothing                     // it had no state of its own
	resetFailed                      // a shared-data error, or CAS lost every attempt
)

// applyResets applies the resets of cfg this process has not applied yet.
func (p *pluginContext) applyResets(resets []policy.Reset) {
	if len(resets) == 0 {
		return
	}
	if !p.vm.seedOK && !p.vm.loadHashSeed() { // placing identities needs the seed
		p.vm.globals().resetFailed.add(uint64(len(resets)))
		logError("sluice: resets not applied: the hash seed could not be read")
		return
	}
	pending, err := claimResets(resets)
	if err != nil {
		p.vm.globals().resetFailed.add(uint64(len(resets)))
		logError("sluice: resets not applied: " + err.Error())
		return
	}
	g := p.vm.globals()
	for _, rs := range pending {
		if rs.All {
			p.vm.walks = append(p.vm.walks, ruleWalk{id: rs.ID, rule: rs.Rule}) // resets_all.go
			continue
		}
		switch p.forget(rs) {
		case resetForgot:
			g.resetApplied.inc()
			logInfo("sluice: reset " + rs.ID + ": rule " + rs.Rule + " forgot an identity's state")
		case resetNothing:
			g.resetApplied.inc()
			logInfo("sluice: reset " + rs.ID + ": rule " + rs.Rule + " held no state of its own for the identity")
		default:
			g.resetFailed.inc()
			logError("sluice: reset " + rs.ID + " of rule " + rs.Rule + " failed; the identity keeps its state")
		}
	}
	if len(p.vm.walks) > 0 {
		p.walkResets() // the first groups at once, the rest on the ticks
	}
}

// claimResets records every id of resets in appliedResetsKey and returns
// the resets no VM of this process had recorded: this VM applies them.
func claimResets(resets []policy.Reset) ([]policy.Reset, error) {
	var buf []byte
	for range maxAttempts {
		v, cas, st := getSharedData(appliedResetsKey, buf)
		buf = v
		if st != statusOK && st != statusNotFound {
			return nil, statusError(st)
		}
		applied := appliedIDs(v)
		var pending []policy.Reset
		for _, rs := range resets {
			if !applied[rs.ID] {
				pending = append(pending, rs)
			}
		}
		if len(pending) == 0 {
			return nil, nil
		}
		err := writeKey(appliedResetsKey, resetIDs(resets), st == statusOK, cas)
		switch {
		case err == nil:
			return pending, nil
		case !errors.Is(err, types.ErrorStatusCasMismatch):
			return nil, err
		}
	}
	return nil, errRetriesExhausted
}

// appliedIDs is the set of ids in an applied list (ids joined by "\n").
func appliedIDs(list []byte) map[string]bool {
	ids := map[string]bool{}
	for len(list) > 0 {
		id, rest, _ := bytes.Cut(list, []byte{'\n'})
		ids[string(id)] = true
		list = rest
	}
	return ids
}

// resetIDs is the applied list of resets: their ids, one per line.
func resetIDs(resets []policy.Reset) []byte {
	var b bytes.Buffer
	for i, rs := range resets {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(rs.ID)
	}
	return b.Bytes()
}

// forget forgets rs's identity's state in its rule.
func (p *pluginContext) forget(rs policy.Reset) resetOutcome {
	r := p.cfg.byName[rs.Rule]
	if r == nil || r.concurrent { // the parser refuses these
		return resetFailed
	}
	identity := string(state.AppendIdentity(nil, rs.Key))
	for range maxAttempts {
		var err error
		var forgot bool
		switch {
		case r.fleet != nil:
			forgot, err = p.forgetPool(r, identity)
		case r.maxKeys == 0:
			forgot, err = forgetKey(r.keyPrefix + identity)
		default:
			forgot, err = p.forgetWay(r, identity, identity)
		}
		switch {
		case err == nil && forgot:
			return resetForgot
		case err == nil:
			return resetNothing
		case !errors.Is(err, types.ErrorStatusCasMismatch):
			return resetFailed
		}
	}
	return resetFailed
}

// forgetKey empties an exact-mode key, if it exists.
func forgetKey(key string) (bool, error) {
	v, cas, st := getSharedData(key, nil)
	switch {
	case st == statusNotFound || (st == statusOK && len(v) == 0):
		return false, nil
	case st != statusOK:
		return false, statusError(st)
	case cas == 0:
		return false, errZeroCAS
	}
	return true, setSharedData(key, nil, cas)
}

// forgetPool drops a global rule's lease pool of identity, if it has one:
// its leased tokens, its refusal until a time, its fallback share. The
// rate limit service's state of the identity is the admin's to forget.
// A pool is stored under the identity's sluice_id, never the identity.
func (p *pluginContext) forgetPool(r *compiledRule, identity string) (bool, error) {
	id := string(state.AppendSluiceID(nil, identity))
	if r.maxKeys == 0 {
		return forgetKey(r.fleet.exactPrefix + id)
	}
	return p.forgetWay(r, identity, id)
}

// forgetWay frees the way of identity in its group, if it holds one; the
// way's record names its owner by owner (the identity, or a pool's
// sluice_id).
func (p *pluginContext) forgetWay(r *compiledRule, identity, owner string) (bool, error) {
	fp := state.KeyedFingerprint(p.vm.hashKey, identity)
	key := r.groupPrefix + itoa(int64(state.GroupOf(fp, r.groups)))
	v, cas, st := getSharedData(key, nil)
	switch {
	case st == statusNotFound:
		return false, nil
	case st != statusOK:
		return false, statusError(st)
	case cas == 0:
		return false, errZeroCAS
	}
	var g state.Group
	if !g.Read(v) {
		return false, nil // unreadable: every request rewrites it whole anyway
	}
	way := g.Find(fp, owner, recordDecoder(r))
	if way < 0 {
		return false, nil
	}
	var buf []byte
	return true, setSharedData(key, g.WithWay(&buf, way, nil), cas)
}

// recordDecoder decodes the records of r's groups for state.Group.Find.
func recordDecoder(r *compiledRule) func(rec []byte) (uint64, []byte, bool) {
	if r.fleet != nil {
		return func(rec []byte) (uint64, []byte, bool) {
			s, err := state.DecodePool(rec)
			return s.Fingerprint, s.Identity, err == nil
		}
	}
	if r.win != nil {
		var w state.Window
		return func(rec []byte) (uint64, []byte, bool) {
			fp, id, err := state.DecodeWindowSlot(rec, &w)
			return fp, id, err == nil
		}
	}
	var s state.Slot
	return func(rec []byte) (uint64, []byte, bool) {
		err := state.DecodeSlotInto(rec, &s)
		return s.Fingerprint, s.Identity, err == nil
	}
}
