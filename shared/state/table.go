package state

// Group is one group of a bounded table (the format in group.go) as read
// for one request: its ways and overflow record alias the value read, so
// finding, claiming and updating a record copy nothing before the write.
// Token buckets, windows and fleet pools share it; what differs per
// algorithm (how a record decodes, when its state is idle, which pool to
// evict) is passed to Find, Claim and Evict.
//
// The zero Group is an empty group (a key that does not exist yet).
type Group struct {
	value    []byte
	ways     [Ways][]byte
	n        int
	overflow []byte
}

// Read makes g the group value v (g aliases v). A value that does not
// parse reads as an empty group and Read returns false: a write replaces
// it whole. A value of an earlier version reads as one way (SplitGroup).
func (g *Group) Read(v []byte) bool {
	n, ovf, err := SplitGroupOverflow(v, &g.ways)
	if err != nil {
		*g = Group{value: v[:0]}
		return false
	}
	g.value, g.n, g.overflow = v, n, ovf
	return true
}

// Reset makes g an empty group that holds no reference to a value.
func (g *Group) Reset() { *g = Group{} }

// Len returns the number of ways the group has (0 to Ways).
func (g *Group) Len() int { return g.n }

// Way returns the record of way i (empty: a free way), aliasing the value.
func (g *Group) Way(i int) []byte { return g.ways[i] }

// Overflow returns the group's overflow record (empty: none), aliasing the
// value.
func (g *Group) Overflow() []byte { return g.overflow }

// Value returns the group value as read (after patching a record in place,
// the value to write).
func (g *Group) Value() []byte { return g.value }

// otherIdentity reports whether a way certainly holds no record of the
// identity with fingerprint fp: it is empty, or a binary record whose
// fingerprint differs (read without decoding the record).
func otherIdentity(way []byte, fp uint64) bool {
	wfp, ok := RecordFingerprint(way)
	return len(way) == 0 || ok && wfp != fp
}

// Find returns the way holding the record of identity (fingerprint fp),
// or -1. Ways whose binary record carries another fingerprint are skipped
// undecoded; the others are decoded by decode, which returns the record's
// fingerprint and identity (ok false: undecodable) and keeps whatever
// state it decoded for the caller. A record matches only when both the
// fingerprint and the identity are equal.
func (g *Group) Find(fp uint64, identity string, decode func(rec []byte) (fp uint64, id []byte, ok bool)) int {
	for i := 0; i < g.n; i++ {
		if otherIdentity(g.ways[i], fp) {
			continue
		}
		if rfp, id, ok := decode(g.ways[i]); ok && rfp == fp && string(id) == identity {
			return i
		}
	}
	return -1
}

// Claim plans the way a new identity takes in a group of at most ways
// ways. While the group has room it is a way the group does not have yet
// (isNew): the group fills before anything is taken over, so its memory
// reaches its bound early and stays there (a group that grew only when its
// records are busy would keep growing for as long as the proxy runs).
// Otherwise it is the first way that is free: empty, undecodable, or
// holding a state that is idle by the algorithm's level (a full bucket, a
// window with no use in it: it carries no information, so taking its way
// loses nothing); idle decodes a record and says so. -1: every way holds
// an active state of another identity. corrupt reports an undecodable
// non-empty record met on the way.
func (g *Group) Claim(ways int, idle func(rec []byte) (decoded, idle bool)) (way int, isNew, corrupt bool) {
	if g.n < ways {
		return g.n, true, false
	}
	for i := 0; i < g.n; i++ {
		decoded, free := idle(g.ways[i])
		if !decoded {
			corrupt = corrupt || len(g.ways[i]) > 0
		}
		if !decoded || free {
			return i, false, corrupt
		}
	}
	return -1, false, corrupt
}

// Evict returns the way a new identity takes, in a table that evicts
// rather than overflowing, when Claim found none free: the one whose
// record rank ranks lowest (the first of equals), so the table loses what
// it values least; -1 for a group with no ways. Fleet pools evict (a
// pool holds only what the service granted, so losing one under-admits,
// never over-admits); buckets and windows never do (their overflow record
// decides instead).
func (g *Group) Evict(rank func(rec []byte) int64) int {
	way := -1
	var low int64
	for i := 0; i < g.n; i++ {
		if r := rank(g.ways[i]); way < 0 || r < low {
			way, low = i, r
		}
	}
	return way
}

// WithWay returns the group value with way at replaced by rec (at ==
// Len() appends a way): in place, in the value read, when rec keeps the
// way's length (then nothing is copied but rec), else spliced into *buf,
// which grows as needed (ReplaceWay).
func (g *Group) WithWay(buf *[]byte, at int, rec []byte) []byte {
	if at < g.n && len(g.ways[at]) == len(rec) && len(rec) > 0 && IsGroup(g.value) {
		copy(g.ways[at], rec)
		return g.value
	}
	*buf = ReplaceWay((*buf)[:0], g.value, at, rec)
	return *buf
}

// WithOverflow returns the group value with its overflow record replaced
// by rec: in place when the group has one of that length, else spliced
// into *buf (ReplaceOverflow).
func (g *Group) WithOverflow(buf *[]byte, rec []byte) []byte {
	if len(g.overflow) == len(rec) && len(rec) > 0 && len(g.value) > 0 && g.value[0] == GroupFormat {
		copy(g.overflow, rec)
		return g.value
	}
	*buf = ReplaceOverflow((*buf)[:0], g.value, rec)
	return *buf
}

// WithoutOverflow returns, in *buf, the group with way at replaced by rec
// and no overflow record: for a claim that finds the overflow record idle,
// which is what no record means, so groups carry one only while it holds
// information.
func (g *Group) WithoutOverflow(buf *[]byte, at int, rec []byte) []byte {
	*buf = AppendGroupOverflow((*buf)[:0], nil, g.ways[:g.n], at, rec)
	return *buf
}
