package telemetry

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Bucket rejects are also kept per 10-second slot for the last minute, to
// rank the keys by how much they are being rejected now.
const (
	rejectSlot    = 10 // seconds
	rejectSlots   = 6
	RecentRejects = rejectSlot * rejectSlots * time.Second // the window of KeyView.RecentRejects
)

type bucketKey struct{ rule, node, identity string }

// groupKey is a key of a rule, whatever the node.
type groupKey struct{ rule, identity string }

// bucketEntry is the latest state of one bucket of one node.
type bucketEntry struct {
	key                       bucketKey
	tokens, burst, lastRefill float64
	algorithm                 string // "" (token_bucket) or a windowed algorithm
	total                     uint64 // rejects since the admin first saw it
	recent                    [rejectSlots]struct{ slot, n int64 }
	seen                      time.Time // last reported
	prev, next                *bucketEntry
	group                     *group
}

// group is the buckets of one key of one rule, one per node that reported
// it: what the dashboard shows as one row.
type group struct {
	key     groupKey
	entries []*bucketEntry
}

// recentRejects sums the rejects of the last minute; cur is the current
// slot (unix seconds / rejectSlot).
func (e *bucketEntry) recentRejects(cur int64) uint64 {
	var n uint64
	for _, r := range e.recent {
		if r.slot > cur-rejectSlots && r.slot <= cur {
			n += uint64(r.n)
		}
	}
	return n
}

// buckets is a map plus a list in order of last report (most recent at
// the head), bounded by max: the tail is evicted first. Entries are also
// grouped by key (rule and identity) across nodes.
type buckets struct {
	m      map[bucketKey]*bucketEntry
	groups map[groupKey]*group
	head   *bucketEntry
	tail   *bucketEntry
	max    int
}

func (b *buckets) init(max int) {
	b.m = make(map[bucketKey]*bucketEntry, min(max, 1024))
	b.groups = make(map[groupKey]*group, min(max, 1024))
	b.max = max
}

// remove forgets an entry.
func (b *buckets) remove(e *bucketEntry) {
	b.unlink(e)
	delete(b.m, e.key)
	g := e.group
	for i, o := range g.entries {
		if o == e {
			last := len(g.entries) - 1
			g.entries[i] = g.entries[last]
			g.entries[last] = nil
			g.entries = g.entries[:last]
			break
		}
	}
	if len(g.entries) == 0 {
		delete(b.groups, g.key)
	}
}

func (b *buckets) len() int { return len(b.m) }

func (b *buckets) unlink(e *bucketEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		b.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (b *buckets) pushFront(e *bucketEntry) {
	e.next = b.head
	if b.head != nil {
		b.head.prev = e
	}
	b.head = e
	if b.tail == nil {
		b.tail = e
	}
}

// put records one reported bucket of node at now. Several VMs of a node
// share its buckets: the state refilled last wins, rejects add up.
func (b *buckets) put(rb *Bucket, node string, now time.Time, evicted *uint64) {
	k := bucketKey{rb.Rule, node, rb.Identity}
	e := b.m[k]
	if e == nil {
		if len(b.m) >= b.max && b.tail != nil {
			b.remove(b.tail)
			*evicted++
		}
		e = &bucketEntry{key: k, lastRefill: -1}
		b.m[k] = e
		gk := groupKey{rb.Rule, rb.Identity}
		g := b.groups[gk]
		if g == nil {
			g = &group{key: gk}
			b.groups[gk] = g
		}
		g.entries = append(g.entries, e)
		e.group = g
	} else {
		b.unlink(e)
	}
	b.pushFront(e)
	if rb.LastRefill >= e.lastRefill {
		e.tokens, e.burst, e.lastRefill, e.algorithm = rb.Tokens, rb.Burst, rb.LastRefill, rb.Algorithm
	}
	e.seen = now
	if rb.Rejects > 0 {
		e.total = satAdd(e.total, rb.Rejects)
		slot := now.Unix() / rejectSlot
		r := &e.recent[int(((slot%rejectSlots)+rejectSlots)%rejectSlots)]
		if r.slot != slot {
			r.slot, r.n = slot, 0
		}
		r.n += int64(min(rb.Rejects, 1<<40)) // bounded: cannot overflow

	}
}

// expire drops the buckets last reported before cut.
func (b *buckets) expire(cut time.Time) int {
	n := 0
	for b.tail != nil && b.tail.seen.Before(cut) {
		b.remove(b.tail)
		n++
	}
	return n
}

// KeyView is one key of one rule as the dashboard and the API show it:
// the buckets of that key on every node that reported it, merged. Each
// Envoy node has its own bucket for a key; Tokens, Burst and LastRefill
// are those of the emptiest of them (on Node when Nodes is 1), rejects are
// summed, Seen is the latest report.
type KeyView struct {
	Rule       string  `json:"rule"`
	Identity   string  `json:"identity"`
	Node       string  `json:"node"`  // the node of the bucket shown (the emptiest)
	Nodes      int     `json:"nodes"` // nodes that reported the key
	Tokens     float64 `json:"tokens"`
	Burst      float64 `json:"burst"`
	LastRefill float64 `json:"last_refill"`
	// Algorithm is "" for token buckets, else the windowed algorithm:
	// then Tokens is the quota left and Burst the window's limit.
	Algorithm string    `json:"algorithm,omitempty"`
	Recent    uint64    `json:"recent_rejects"` // rejects in the last minute
	Total     uint64    `json:"total_rejects"`  // since the admin first saw the buckets
	Seen      time.Time `json:"seen"`           // when a report last carried the key
	// MaskedMatch: a search matched this key only on the visible part of a
	// masked identity component (the rest is a hash): a candidate, not a
	// certainty.
	MaskedMatch bool `json:"masked_match,omitempty"`
}

func (e *bucketEntry) view(now time.Time) KeyView {
	return KeyView{
		Rule: e.key.rule, Node: e.key.node, Nodes: 1, Identity: e.key.identity,
		Tokens: e.tokens, Burst: e.burst, LastRefill: e.lastRefill, Algorithm: e.algorithm,
		Recent: e.recentRejects(now.Unix() / rejectSlot), Total: e.total, Seen: e.seen,
	}
}

func (e *bucketEntry) fill() float64 {
	if e.burst <= 0 {
		return 1
	}
	return e.tokens / e.burst
}

// view merges the group's buckets into one KeyView.
func (g *group) view(now time.Time) KeyView {
	v := g.entries[0].view(now)
	for _, e := range g.entries[1:] {
		ev := e.view(now)
		v.Nodes++
		v.Recent = satAdd(v.Recent, ev.Recent)
		v.Total = satAdd(v.Total, ev.Total)
		if ev.Seen.After(v.Seen) {
			v.Seen = ev.Seen
		}
		if fill(&ev) < fill(&v) || fill(&ev) == fill(&v) && ev.Node < v.Node {
			v.Node, v.Tokens, v.Burst, v.LastRefill, v.Algorithm = ev.Node, ev.Tokens, ev.Burst, ev.LastRefill, ev.Algorithm
		}
	}
	return v
}

// rank is what orders keys in the "hottest keys" list: most rejects in the
// last minute, then reported in the last 10 seconds, then the emptiest
// bucket, then the most recently reported, then by name.
type rank struct {
	g      *group
	recent uint64
	fresh  bool
	fill   float64 // of the emptiest bucket
	seen   time.Time
	min    *bucketEntry // the emptiest bucket
}

func (g *group) rank(now time.Time, cur int64) rank {
	r := rank{g: g, fill: 2}
	for _, e := range g.entries {
		r.recent += e.recentRejects(cur)
		if e.seen.After(r.seen) {
			r.seen = e.seen
		}
		if f := e.fill(); f < r.fill || f == r.fill && e.key.node < r.min.key.node {
			r.fill, r.min = f, e
		}
	}
	r.fresh = now.Sub(r.seen) <= 10*time.Second
	return r
}

func hotter(a, b *rank) bool {
	if a.recent != b.recent {
		return a.recent > b.recent
	}
	if a.fresh != b.fresh {
		return a.fresh
	}
	if a.fill != b.fill {
		return a.fill < b.fill
	}
	if !a.seen.Equal(b.seen) {
		return a.seen.After(b.seen)
	}
	if a.g.key.rule != b.g.key.rule {
		return a.g.key.rule < b.g.key.rule
	}
	if a.g.key.identity != b.g.key.identity {
		return a.g.key.identity < b.g.key.identity
	}
	return a.min.key.node < b.min.key.node
}

func fill(k *KeyView) float64 {
	if k.Burst <= 0 {
		return 1
	}
	return k.Tokens / k.Burst
}

// topN keeps the n hottest groups offered to it, sorted.
type topN struct {
	n     int
	now   time.Time
	cur   int64
	ranks []rank
}

func newTopN(n int, now time.Time) *topN {
	return &topN{n: n, now: now, cur: now.Unix() / rejectSlot}
}

func (t *topN) offer(g *group) {
	if t.n <= 0 {
		return
	}
	r := g.rank(t.now, t.cur)
	if len(t.ranks) == t.n && !hotter(&r, &t.ranks[len(t.ranks)-1]) {
		return
	}
	i := len(t.ranks)
	if i == t.n {
		i--
	} else {
		t.ranks = append(t.ranks, rank{})
	}
	for i > 0 && hotter(&r, &t.ranks[i-1]) {
		t.ranks[i] = t.ranks[i-1]
		i--
	}
	t.ranks[i] = r
}

// keys returns the views of the groups kept, hottest first.
func (t *topN) keys() []KeyView {
	out := make([]KeyView, len(t.ranks))
	for i := range t.ranks {
		out[i] = t.ranks[i].g.view(t.now)
	}
	return out
}

// MaxQueryLen bounds a search query.
const MaxQueryLen = 256

// match reports whether identity matches the query q:
//   - q appears in it (ASCII case-insensitively): a match;
//   - q (or the part of q after its last '=') is the clear value of a
//     masked component. The plugin masks a value as
//     "<first 4 characters>…#<8 hex digits>", the digits being the low 32
//     bits of FNV-1a 64 of the value (values of 8 characters or fewer show
//     no characters). When the digits are those of q's hash (and q starts
//     with the characters shown), it is a match;
//   - otherwise, when q starts with the characters shown and is longer, it
//     is a candidate (masked = true): the rest of the value is hidden.
func match(identity, q string) (ok, masked bool) {
	if containsFold(identity, q) {
		return true, false
	}
	val := q
	if i := strings.LastIndexByte(val, '='); i >= 0 {
		val = val[i+1:]
	}
	if val == "" {
		return false, false
	}
	hash := ""
	for rest := identity; ; {
		i := strings.Index(rest, "…")
		if i < 0 {
			return ok, masked
		}
		start := i
		for start > 0 && !isComponentSep(rest[start-1]) {
			start--
		}
		visible := rest[start:i]
		after := rest[i+len("…"):]
		rest = after
		if !strings.HasPrefix(val, visible) || len(val) <= len(visible) {
			continue
		}
		if len(after) >= 9 && after[0] == '#' && isHex8(after[1:9]) {
			if hash == "" {
				hash = maskHash(val)
			}
			if after[1:9] == hash {
				return true, false
			}
			continue // the hash says it is another value
		}
		if visible != "" {
			ok, masked = true, true
		}
	}
}

// maskHash is the hash the plugin shows after "…#": the low 32 bits of
// FNV-1a 64 of the value, 8 lower-case hex digits.
func maskHash(v string) string {
	h := uint64(14695981039346656037)
	for i := 0; i < len(v); i++ {
		h ^= uint64(v[i])
		h *= 1099511628211
	}
	return FormatHash(h)[8:]
}

func isHex8(s string) bool {
	for i := 0; i < 8; i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func isComponentSep(c byte) bool {
	switch c {
	case '=', '|', ',', ' ', ':', '&', ';':
		return true
	}
	return false
}

// containsFold reports whether sub is within s, ASCII letters compared
// case-insensitively (other bytes exactly).
func containsFold(s, sub string) bool {
	if sub == "" {
		return true
	}
	if !hasLetter(sub) {
		return strings.Contains(s, sub)
	}
	first := lower(sub[0])
	for i := 0; i+len(sub) <= len(s); i++ {
		if lower(s[i]) != first {
			continue
		}
		j := 1
		for j < len(sub) && lower(s[i+j]) == lower(sub[j]) {
			j++
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

func hasLetter(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c >= 'a' && c <= 'z' {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// CleanQuery trims a search query and bounds it to MaxQueryLen bytes.
func CleanQuery(q string) string {
	q = strings.TrimSpace(q)
	if len(q) > MaxQueryLen {
		cut := MaxQueryLen
		for cut > 0 && !utf8.RuneStart(q[cut]) {
			cut--
		}
		q = q[:cut]
	}
	return q
}
