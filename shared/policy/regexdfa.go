package policy

import (
	"regexp/syntax"
	"slices"
)

// asciiDFA is a deterministic automaton built at configuration time from a
// regex's compiled program, for ASCII values: one table lookup per byte
// instead of regexp's matcher, which costs about a microsecond per request
// in a wasm VM. It answers whether the regex matches anywhere (or, when
// anchored, where its anchors say). A value with a non-ASCII byte is left
// to regexp, so Unicode classes, "." and case folding keep their meaning.
// Programs with other assertions than ^ and $ (multi-line, \b) or too many
// states get no automaton.
type asciiDFA struct {
	next    [][128]uint16 // state -> byte -> state
	matched []bool        // a match ends inside the value read so far
	atEnd   []bool        // a match ends at the end of the value
}

// maxDFAStates bounds an automaton (at 256 bytes a state, 64 KiB) and its
// construction time.
const maxDFAStates = 256

// match reports whether the regex matches v; ok is false when v is not
// ASCII (ask regexp).
func (d *asciiDFA) match(v string) (matched, ok bool) {
	s := uint16(1) // the start state
	for i := 0; i < len(v); i++ {
		if d.matched[s] {
			return true, true
		}
		c := v[i]
		if c >= 0x80 {
			return false, false
		}
		s = d.next[s][c]
	}
	return d.matched[s] || d.atEnd[s], true
}

// buildDFA returns the automaton of a regex, or nil.
func buildDFA(re string) *asciiDFA {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return nil
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil
	}
	for _, in := range prog.Inst {
		if in.Op == syntax.InstEmptyWidth && syntax.EmptyOp(in.Arg)&^(syntax.EmptyBeginText|syntax.EmptyEndText) != 0 {
			return nil
		}
	}
	b := dfaBuilder{prog: prog, ids: map[string]uint16{}}
	anchored := prog.StartCond()&syntax.EmptyBeginText != 0
	b.startMid = b.closure([]uint32{uint32(prog.Start)}, 0)
	if anchored {
		b.startMid = nil // threads start at position 0 only
	}
	d := &asciiDFA{}
	b.d = d
	b.add(nil) // dead
	// The start state is position 0, where ^ holds, and for an empty value
	// $ too ($^ matches ""). So it is not shared with a later position that
	// has the same threads (that one gets a state of its own), and its
	// atEnd counts both.
	start := b.closure([]uint32{uint32(prog.Start)}, syntax.EmptyBeginText)
	b.add(start)
	delete(b.ids, key(start))
	d.atEnd[1] = b.matchesAt(start, syntax.EmptyBeginText|syntax.EmptyEndText)
	for s := 1; s < len(b.sets); s++ {
		for c := 0; c < 128; c++ {
			var raw []uint32
			for _, pc := range b.sets[s] {
				in := &prog.Inst[pc]
				switch in.Op {
				case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
					if in.MatchRune(rune(c)) {
						raw = append(raw, in.Out)
					}
				}
			}
			next := mergeSets(b.closure(raw, 0), b.startMid)
			id, ok := b.ids[key(next)]
			if !ok {
				if len(b.sets) >= maxDFAStates {
					return nil
				}
				id = b.add(next)
			}
			d.next[s][c] = id
		}
	}
	return d
}

type dfaBuilder struct {
	prog     *syntax.Prog
	d        *asciiDFA
	sets     [][]uint32 // per state, its sorted thread pcs
	ids      map[string]uint16
	startMid []uint32 // unanchored: the threads started at every later position
}

// add makes a state of a thread set.
func (b *dfaBuilder) add(set []uint32) uint16 {
	id := uint16(len(b.sets))
	b.sets = append(b.sets, set)
	b.ids[key(set)] = id
	b.d.next = append(b.d.next, [128]uint16{})
	b.d.matched = append(b.d.matched, slices.ContainsFunc(set, func(pc uint32) bool { return b.prog.Inst[pc].Op == syntax.InstMatch }))
	b.d.atEnd = append(b.d.atEnd, b.matchesAt(set, syntax.EmptyEndText))
	return id
}

// matchesAt reports whether a thread of set reaches a match where the
// assertions ctx hold.
func (b *dfaBuilder) matchesAt(set []uint32, ctx syntax.EmptyOp) bool {
	return slices.ContainsFunc(b.closure(set, ctx), func(pc uint32) bool { return b.prog.Inst[pc].Op == syntax.InstMatch })
}

// closure follows the non-consuming instructions from pcs; assertions hold
// when their flags are in ctx, and stay in the set (to be tried at the end
// of the value) either way. The result is sorted.
func (b *dfaBuilder) closure(pcs []uint32, ctx syntax.EmptyOp) []uint32 {
	seen := map[uint32]bool{}
	var out []uint32
	var visit func(pc uint32)
	visit = func(pc uint32) {
		if seen[pc] {
			return
		}
		seen[pc] = true
		in := &b.prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			visit(in.Out)
			visit(in.Arg)
		case syntax.InstNop, syntax.InstCapture:
			visit(in.Out)
		case syntax.InstEmptyWidth:
			out = append(out, pc)
			if syntax.EmptyOp(in.Arg)&^ctx == 0 {
				visit(in.Out)
			}
		case syntax.InstFail:
		default:
			out = append(out, pc)
		}
	}
	for _, pc := range pcs {
		visit(pc)
	}
	slices.Sort(out)
	return out
}

func mergeSets(a, b []uint32) []uint32 {
	if len(b) == 0 {
		return a
	}
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

func key(set []uint32) string {
	b := make([]byte, 0, 4*len(set))
	for _, pc := range set {
		b = append(b, byte(pc), byte(pc>>8), byte(pc>>16), byte(pc>>24))
	}
	return string(b)
}
