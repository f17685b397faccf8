package filter

import (
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Resets of every identity of a rule ("resets" entries with "all": true):
// the rule starts over, every identity's next request as a new one's.
//
// Bounded storage keeps a rule's state in a known set of shared-data keys,
// its groups (state.Groups of max_keys, "<prefix>#<group>"; a global
// rule's lease pools in "fl:<rule>:#<group>"), so the VM that claimed the
// reset (resets.go) walks them and empties each one that exists, with
// compare-and-swap: a request that read a group before the walk emptied
// it fails its write and reads the empty group, a new identity's. An empty
// value reads as a group with no ways and no overflow state. Exact storage
// keeps a key per identity, which cannot be listed; the parser refuses an
// "all" reset of such a rule.
//
// Walking a large table takes time (a million groups at the largest
// max_keys), so a walk goes walkChunk groups at a time: the first chunk as
// the configuration loads, the others on the VM's ticks, every walkTickMS.
// The walks belong to the VM, not to the root context that claimed them:
// a configuration pushed meanwhile replaces the root context, and its
// ticks carry the walk on, against the rule as that configuration has it.
// A group that cannot be emptied (a shared-data error, or compare-and-swap
// lost maxAttempts times) keeps its state, and the reset counts as failed
// once the walk ends.

const (
	walkChunk  = 2048 // groups per turn: about 2 ms of a worker under Envoy's JIT
	walkTickMS = 10   // between turns: the default table (16,384 groups) in 70 ms, the largest in about 5 s
)

// ruleWalk is one reset of every identity of a rule, in progress.
type ruleWalk struct {
	id, rule string
	next     int // the next group to empty
	emptied  int // groups that held state
	failed   int // groups that could not be emptied
}

// walkResets empties the next walkChunk groups of each walk in progress,
// and ends the walks that are done.
func (p *pluginContext) walkResets() {
	walks := p.vm.walks[:0]
	for _, w := range p.vm.walks {
		if p.walkTurn(&w) {
			walks = append(walks, w)
		}
	}
	clear(p.vm.walks[len(walks):])
	p.vm.walks = walks
}

// walkTurn empties the next chunk of w's groups. False when w is done
// (every group passed, or the rule is gone or no longer bounded).
func (p *pluginContext) walkTurn(w *ruleWalk) bool {
	r := p.ruleByName(w.rule)
	if r == nil || r.maxKeys == 0 || r.concurrent {
		p.endWalk(w, "the rule is no longer a rule of bounded storage in this configuration")
		return false
	}
	end := min(w.next+walkChunk, r.groups)
	for ; w.next < end; w.next++ {
		switch emptied, err := emptyGroup(r.groupPrefix + itoa(int64(w.next))); {
		case err != nil:
			w.failed++
		case emptied:
			w.emptied++
		}
	}
	if w.next < r.groups {
		return true
	}
	p.endWalk(w, "")
	return false
}

func (p *pluginContext) ruleByName(name string) *compiledRule {
	if p.cfg == nil {
		return nil
	}
	return p.cfg.byName[name]
}

// endWalk counts and logs a finished walk; why says why it stopped early.
func (p *pluginContext) endWalk(w *ruleWalk, why string) {
	g := p.vm.globals()
	switch {
	case why != "":
		g.resetFailed.inc()
		logError("sluice: reset " + w.id + " of every identity of rule " + w.rule + " stopped: " + why)
	case w.failed > 0:
		g.resetFailed.inc()
		logError("sluice: reset " + w.id + " of every identity of rule " + w.rule + ": " + itoa(int64(w.failed)) +
			" groups could not be emptied and keep their state")
	default:
		g.resetApplied.inc()
		logInfo("sluice: reset " + w.id + ": rule " + w.rule + " forgot every identity's state (" + itoa(int64(w.emptied)) + " groups held some)")
	}
}

// emptyGroup empties the group key as a reset forgets an exact-mode key
// (forgetKey), retrying a lost race. emptied: it held something.
func emptyGroup(key string) (emptied bool, err error) {
	for range maxAttempts {
		emptied, err = forgetKey(key)
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return emptied, err
		}
	}
	return false, errRetriesExhausted
}
