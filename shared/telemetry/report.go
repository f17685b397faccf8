package telemetry

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/shared/policy"
)

// FormatVersion is the report format ("v") this admin understands.
const FormatVersion = 1

// Limits of a report. A report over any of them is refused whole.
const (
	MaxBodyBytes     = 1 << 20 // the request body; larger is refused with 413
	MaxNodeLen       = 256     // characters of "node" (a byte cut mid-character arrives as U+FFFD: one character)
	MaxVMLen         = 64      // bytes of "vm"
	MaxIdentityLen   = 1024    // bytes of a bucket's "identity"
	MaxReportRules   = 1024    // entries of "rules"
	MaxReportBuckets = 10000   // entries of "buckets"
	MaxIntervalMS    = 3600000 // "interval_ms" (one hour)
	MaxErrors        = 100     // problems listed in one answer; the rest are counted

	// MaxOverflowIdentities bounds a rule's "overflow_identities" (2^32):
	// an estimate of distinct identities, which the plugin caps there.
	MaxOverflowIdentities = 1 << 32

	maxTimeMS = 253402300799999 // 9999-12-31T23:59:59.999Z, in ms since the epoch
)

// DefaultIntervalMS is the interval assumed when a report has no "interval_ms".
const DefaultIntervalMS = 1000

// Report is one validated telemetry report (docs/telemetry.md). Its JSON
// encoding is the wire format.
type Report struct {
	V              int            `json:"v"`
	Node           string         `json:"node"`
	VM             string         `json:"vm"`
	VMStartMS      int64          `json:"vm_start_ms"`
	Seq            uint64         `json:"seq"`
	SentAtMS       int64          `json:"sent_at_ms"`
	IntervalMS     int64          `json:"interval_ms"`
	ConfigHash     string         `json:"config_hash,omitempty"` // 16 lower-case hex digits, or ""
	Rules          []RuleCounters `json:"rules"`
	Buckets        []Bucket       `json:"buckets"`
	ReportsDropped uint64         `json:"reports_dropped"`
	Fleet          *Fleet         `json:"fleet,omitempty"` // fleet.go: only with global rules
}

// RuleCounters are one rule's cumulative counters since the VM started,
// and one gauge (OverflowIdentities).
type RuleCounters struct {
	Rule           string `json:"rule"`
	Allowed        uint64 `json:"allowed"`
	Rejected       uint64 `json:"rejected"`
	ShadowRejected uint64 `json:"shadow_rejected"`
	FailOpen       uint64 `json:"fail_open"`
	// Overflowed counts the requests decided by a group's overflow limit:
	// their identity found no place in its group of the bounded table, so
	// it shared the group's one overflow limit with the other identities
	// left out. Each of them is also counted as allowed, rejected, ...
	// Optional (0): plugins before the overflow limit do not send it.
	Overflowed uint64 `json:"overflowed,omitempty"`
	// OverflowIdentities is the largest estimated number of distinct
	// identities sharing one overflow limit that the VM saw since its
	// previous report (0 to MaxOverflowIdentities; 0: none). A gauge, not
	// cumulative. Optional (0).
	OverflowIdentities uint64 `json:"overflow_identities,omitempty"`
	// Exempted, Denied and Overridden count the requests an exempt rule
	// let through, a deny rule rejected, and the rule decided with an
	// override's limits (also counted as allowed, rejected, ...).
	// Optional (0).
	Exempted   uint64 `json:"exempted,omitempty"`
	Denied     uint64 `json:"denied,omitempty"`
	Overridden uint64 `json:"overridden,omitempty"`
	// ResponseCharged counts the charges of a rule whose cost comes from
	// the response; ResponseDefault those of default_cost (the response
	// reported no cost, or the stream ended first) and ResponseInvalid
	// those whose reported value was not a cost (also in ResponseDefault).
	// Optional (0).
	ResponseCharged uint64 `json:"response_charged,omitempty"`
	ResponseDefault uint64 `json:"response_default,omitempty"`
	ResponseInvalid uint64 `json:"response_invalid,omitempty"`
	// KeyMissing counts the requests the rule matched but skipped because
	// one of its limit keys had no value (a header absent, metadata a
	// filter did not write). Optional (0).
	KeyMissing uint64 `json:"key_missing,omitempty"`
	// Blocked counts the identities the rule's refusals put in a block
	// (block_seconds). Optional (0).
	Blocked uint64 `json:"blocked,omitempty"`
}

// Bucket is the state of one bucket as a VM last saw it. Rejects are the
// requests this VM rejected on it since its previous report.
type Bucket struct {
	Rule       string  `json:"rule"`
	Identity   string  `json:"identity"`
	Tokens     float64 `json:"tokens"`
	Burst      float64 `json:"burst"`
	LastRefill float64 `json:"last_refill"` // unix seconds
	Rejects    uint64  `json:"rejects"`
	// Algorithm is sent for windowed rules only (fixed_window,
	// sliding_window, rolling_window): then Tokens is the quota left in
	// the window, Burst the limit and LastRefill the start of the current
	// period. "" means token_bucket.
	Algorithm string `json:"algorithm,omitempty"`
}

// FieldError is one problem of a report, at a JSON path such as
// "rules[1].allowed" ("" for the whole body): the configuration's field
// error (the same type, so both render and marshal alike).
type FieldError = policy.FieldError

// Errors is every problem found in a report, in document order (at most
// MaxErrors, then one line saying how many more there were).
type Errors = policy.Errors

// Decode parses and validates a report. It returns the report, or every
// problem found as Errors (nil report): a report is used whole or not at
// all. It never panics, whatever data holds.
//
// The format is strict: fields are matched exactly (case included), unknown
// and duplicate fields are errors, integers must be written as integers,
// and null is not a value, except that "rules" and "buckets" may be null
// for an empty array (a nil slice in Go). Optional fields: interval_ms
// (default 1000), config_hash, buckets, reports_dropped, fleet, and the
// rules' overflowed and overflow_identities (default 0).
func Decode(data []byte) (*Report, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, Errors{{Message: "the body is empty; send a JSON report (docs/telemetry.md)"}}
	}
	if !json.Valid(data) {
		return nil, Errors{{Message: syntaxMessage(data)}}
	}
	p := parser{b: data}
	r := p.report()
	if len(p.errs) > 0 {
		if p.more > 0 {
			p.errs = append(p.errs, FieldError{Message: strconv.Itoa(p.more) + " more problems not listed"})
		}
		return nil, p.errs
	}
	return r, nil
}

// syntaxMessage describes why data is not JSON, with the byte offset.
func syntaxMessage(data []byte) string {
	var v struct{}
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return "the body is not valid JSON (at byte offset " + strconv.FormatInt(se.Offset, 10) + "): " + se.Error()
	case err != nil:
		return "the body is not valid JSON: " + err.Error()
	}
	return "the body is not valid JSON"
}

// parser reads a report from JSON that json.Valid accepted, collecting
// every problem with its path. Its grammar is the report's, not JSON's:
// anything else is skipped with an error.
type parser struct {
	b     []byte
	i     int
	errs  Errors
	more  int
	names map[string]string // rule names seen, to share one string per name
}

// loc is a path in a report: a top-level field, or a field of an element
// of the rules or buckets array. Built only when there is an error.
type loc struct {
	arr   string
	idx   int
	field string
}

func (l loc) String() string {
	switch {
	case l.arr == "":
		return l.field
	case l.field == "":
		return l.arr + "[" + strconv.Itoa(l.idx) + "]"
	}
	return l.arr + "[" + strconv.Itoa(l.idx) + "]." + l.field
}

func (l loc) with(field string) loc { l.field = field; return l }

func (p *parser) errorf(l loc, msg ...string) {
	if len(p.errs) >= MaxErrors {
		p.more++
		return
	}
	p.errs = append(p.errs, FieldError{Path: l.String(), Message: strings.Join(msg, "")})
}

// Top-level fields, as bits of a presence mask.
const (
	fV = 1 << iota
	fNode
	fVM
	fVMStart
	fSeq
	fSentAt
	fInterval
	fConfigHash
	fRules
	fBuckets
	fDropped
	fFleet
)

var reportFields = []objField{
	{FieldV, fV, true}, {FieldNode, fNode, true}, {FieldVM, fVM, true}, {FieldVMStartMS, fVMStart, true},
	{FieldSeq, fSeq, true}, {FieldSentAtMS, fSentAt, true}, {FieldIntervalMS, fInterval, false},
	{FieldConfigHash, fConfigHash, false}, {FieldRules, fRules, true}, {FieldBuckets, fBuckets, false},
	{FieldReportsDropped, fDropped, false}, {FieldFleet, fFleet, false},
}

// The field lists of the error messages, from the shared names (constants:
// nothing to build when the package starts, in the plugin either).
const reportFieldList = FieldV + ", " + FieldNode + ", " + FieldVM + ", " + FieldVMStartMS + ", " + FieldSeq + ", " +
	FieldSentAtMS + ", " + FieldIntervalMS + ", " + FieldConfigHash + ", " + FieldRules + ", " + FieldBuckets + ", " +
	FieldReportsDropped + ", " + FieldFleet

func (p *parser) report() *Report {
	r := &Report{IntervalMS: DefaultIntervalMS, Rules: []RuleCounters{}, Buckets: []Bucket{}}
	if c := p.peek(); c != '{' {
		p.errorf(loc{}, "the report must be a JSON object, got ", kindName(c))
		return r
	}
	seen := p.fields(loc{}, reportFieldList, reportFields, func(bit int, l loc) {
		switch bit {
		case fV:
			if v, ok := p.int64(l); ok {
				r.V = int(v)
				if v != FormatVersion {
					p.errorf(l, "unsupported report version ", strconv.FormatInt(v, 10), "; this admin understands version ", strconv.Itoa(FormatVersion))
				}
			}
		case fNode:
			if s, ok := p.str(l); ok {
				r.Node = s
				p.checkNode(l, s)
			}
		case fVM:
			if s, ok := p.str(l); ok {
				r.VM = s
				p.checkVM(l, s)
			}
		case fVMStart:
			if v, ok := p.int64(l); ok {
				r.VMStartMS = v
				p.checkTimeMS(l, v)
			}
		case fSeq:
			r.Seq, _ = p.uint64(l)
		case fSentAt:
			if v, ok := p.int64(l); ok {
				r.SentAtMS = v
				p.checkTimeMS(l, v)
			}
		case fInterval:
			if v, ok := p.int64(l); ok {
				r.IntervalMS = v
				if v < 1 || v > MaxIntervalMS {
					p.errorf(l, strconv.FormatInt(v, 10), " is out of range; use 1 to ", strconv.Itoa(MaxIntervalMS), " (milliseconds)")
				}
			}
		case fConfigHash:
			if s, ok := p.str(l); ok {
				if h, hok := normalizeHash(s); hok {
					r.ConfigHash = h
				} else {
					p.errorf(l, quote(s), " is not a hash; send FNV-1a 64 of the plugin configuration as 16 hex digits")
				}
			}
		case fRules:
			p.array(loc{field: "rules"}, MaxReportRules, func(i int) {
				r.Rules = append(r.Rules, p.rule(loc{arr: "rules", idx: i}))
			})
		case fBuckets:
			p.array(loc{field: "buckets"}, MaxReportBuckets, func(i int) {
				r.Buckets = append(r.Buckets, p.bucket(loc{arr: "buckets", idx: i}))
			})
		case fDropped:
			r.ReportsDropped, _ = p.uint64(l)
		case fFleet:
			r.Fleet = p.fleet(l)
		}
	})
	p.required(loc{}, seen, reportFields)
	if len(p.errs) == 0 {
		p.crossCheck(r)
	}
	return r
}

// crossCheck finds the problems that span fields: duplicate rules, buckets
// of rules the report has no counters for. The same bucket (rule and
// identity) twice is not an error: two keys can mask to the same
// identity, and the admin merges them as it merges the VMs of a node.
func (p *parser) crossCheck(r *Report) {
	rules := make(map[string]int, len(r.Rules))
	for i, rc := range r.Rules {
		if j, dup := rules[rc.Rule]; dup {
			p.errorf(loc{arr: "rules", idx: i, field: "rule"}, quote(rc.Rule), " is also rules[", strconv.Itoa(j), "]; one entry per rule")
			continue
		}
		rules[rc.Rule] = i
	}
	for i, b := range r.Buckets {
		if _, ok := rules[b.Rule]; !ok {
			p.errorf(loc{arr: "buckets", idx: i, field: "rule"}, quote(b.Rule), " is not in rules; every bucket's rule has an entry in rules")
		}
	}
	p.crossCheckFleet(r, rules) // fleet.go
}

const (
	rRule = 1 << iota
	rAllowed
	rRejected
	rShadow
	rFailOpen
	rOverflowed    // optional
	rOverflowIdent // optional
	rExempted      // optional
	rDenied        // optional
	rOverridden    // optional
	rRespCharged   // optional
	rRespDefault   // optional
	rRespInvalid   // optional
	rKeyMissing    // optional
	rBlocked       // optional
)

var ruleFields = []objField{
	{RuleFieldRule, rRule, true}, {RuleFieldAllowed, rAllowed, true}, {RuleFieldRejected, rRejected, true},
	{RuleFieldShadowRejected, rShadow, true}, {RuleFieldFailOpen, rFailOpen, true},
	{RuleFieldOverflowed, rOverflowed, false}, {RuleFieldOverflowIdentities, rOverflowIdent, false},
	{RuleFieldExempted, rExempted, false}, {RuleFieldDenied, rDenied, false}, {RuleFieldOverridden, rOverridden, false},
	{RuleFieldResponseCharged, rRespCharged, false}, {RuleFieldResponseDefault, rRespDefault, false},
	{RuleFieldResponseInvalid, rRespInvalid, false}, {RuleFieldKeyMissing, rKeyMissing, false},
	{RuleFieldBlocked, rBlocked, false},
}

const ruleFieldList = RuleFieldRule + ", " + RuleFieldAllowed + ", " + RuleFieldRejected + ", " + RuleFieldShadowRejected + ", " +
	RuleFieldFailOpen + " and optionally " + RuleFieldOverflowed + ", " + RuleFieldOverflowIdentities + ", " +
	RuleFieldExempted + ", " + RuleFieldDenied + ", " + RuleFieldOverridden + ", " +
	RuleFieldResponseCharged + ", " + RuleFieldResponseDefault + ", " + RuleFieldResponseInvalid + ", " + RuleFieldKeyMissing + ", " + RuleFieldBlocked

// bucketRequired lists a bucket's required fields.
const bucketRequired = BucketFieldRule + ", " + BucketFieldIdentity + ", " + BucketFieldTokens + ", " + BucketFieldBurst + ", " +
	BucketFieldLastRefill + ", " + BucketFieldRejects

func (p *parser) rule(l loc) RuleCounters {
	var rc RuleCounters
	if c := p.peek(); c != '{' {
		p.errorf(l, "must be an object {", ruleFieldList, "}, got ", kindName(c))
		p.skip()
		return rc
	}
	seen := p.fields(l, ruleFieldList, ruleFields, func(bit int, fl loc) {
		switch bit {
		case rRule:
			if s, ok := p.name(fl); ok {
				rc.Rule = s
				p.checkRuleName(fl, s)
			}
		case rAllowed:
			rc.Allowed, _ = p.uint64(fl)
		case rRejected:
			rc.Rejected, _ = p.uint64(fl)
		case rShadow:
			rc.ShadowRejected, _ = p.uint64(fl)
		case rFailOpen:
			rc.FailOpen, _ = p.uint64(fl)
		case rOverflowed:
			rc.Overflowed, _ = p.uint64(fl)
		case rOverflowIdent:
			rc.OverflowIdentities, _ = p.uintUpTo(fl, MaxOverflowIdentities, " (2^32)")
		case rExempted:
			rc.Exempted, _ = p.uint64(fl)
		case rDenied:
			rc.Denied, _ = p.uint64(fl)
		case rOverridden:
			rc.Overridden, _ = p.uint64(fl)
		case rRespCharged:
			rc.ResponseCharged, _ = p.uint64(fl)
		case rRespDefault:
			rc.ResponseDefault, _ = p.uint64(fl)
		case rRespInvalid:
			rc.ResponseInvalid, _ = p.uint64(fl)
		case rBlocked:
			rc.Blocked, _ = p.uint64(fl)
		case rKeyMissing:
			rc.KeyMissing, _ = p.uint64(fl)
		}
	})
	p.required(l, seen, ruleFields)
	return rc
}

const (
	bRule = 1 << iota
	bIdentity
	bTokens
	bBurst
	bLastRefill
	bRejects
	bAlgorithm // optional
)

var bucketFields = []objField{
	{BucketFieldRule, bRule, true}, {BucketFieldIdentity, bIdentity, true}, {BucketFieldTokens, bTokens, true},
	{BucketFieldBurst, bBurst, true}, {BucketFieldLastRefill, bLastRefill, true}, {BucketFieldRejects, bRejects, true},
	{BucketFieldAlgorithm, bAlgorithm, false},
}

func (p *parser) bucket(l loc) Bucket {
	var b Bucket
	if c := p.peek(); c != '{' {
		p.errorf(l, "must be an object {", bucketRequired, "}, got ", kindName(c))
		p.skip()
		return b
	}
	good := 0
	seen := p.fields(l, bucketRequired+" and optionally "+BucketFieldAlgorithm, bucketFields, func(bit int, fl loc) {
		ok := false
		switch bit {
		case bRule:
			if b.Rule, ok = p.name(fl); ok {
				ok = p.checkRuleName(fl, b.Rule)
			}
		case bIdentity:
			if b.Identity, ok = p.str(fl); ok {
				switch {
				case b.Identity == "":
					p.errorf(fl, "is empty")
				case len(b.Identity) > MaxIdentityLen:
					p.errorf(fl, "is ", strconv.Itoa(len(b.Identity)), " bytes long; at most ", strconv.Itoa(MaxIdentityLen))
				}
			}
		case bTokens:
			b.Tokens, ok = p.float(fl)
		case bBurst:
			if b.Burst, ok = p.float(fl); ok && !(b.Burst > 0 && b.Burst <= policy.MaxBurst) {
				p.errorf(fl, fmtFloat(b.Burst), " is out of range; a burst is above 0 and at most ", fmtFloat(policy.MaxBurst))
				ok = false
			}
		case bLastRefill:
			if b.LastRefill, ok = p.float(fl); ok && !(b.LastRefill >= 0 && b.LastRefill <= maxTimeMS/1000) {
				p.errorf(fl, fmtFloat(b.LastRefill), " is not a time; send unix seconds")
			}
		case bRejects:
			b.Rejects, ok = p.uint64(fl)
		case bAlgorithm:
			if b.Algorithm, ok = p.str(fl); ok && !policy.IsAlgorithm(b.Algorithm) {
				p.errorf(fl, quote(b.Algorithm), " is not an algorithm; one of ", strings.Join(policy.Algorithms(), ", "))
				b.Algorithm, ok = "", false
			}
		}
		if ok {
			good |= bit
		}
	})
	p.required(l, seen, bucketFields)
	// Tokens are within [0, burst]; a little rounding above burst is fine.
	if good&bTokens != 0 {
		switch {
		case b.Tokens < 0:
			p.errorf(l.with("tokens"), fmtFloat(b.Tokens), " is negative")
		case good&bBurst != 0 && b.Tokens > b.Burst*(1+1e-9)+1e-9:
			p.errorf(l.with("tokens"), fmtFloat(b.Tokens), " is above the burst ", fmtFloat(b.Burst))
		}
	}
	return b
}

func (p *parser) checkNode(l loc, s string) {
	switch n := utf8.RuneCountInString(s); {
	case s == "":
		p.errorf(l, "is empty; send the node id (\"unknown\" if there is none)")
	case n > MaxNodeLen:
		p.errorf(l, "is ", strconv.Itoa(n), " characters long; at most ", strconv.Itoa(MaxNodeLen))
	default:
		for _, c := range s {
			if c < 0x20 || (c >= 0x7f && c < 0xa0) {
				p.errorf(l, quote(s), " contains a control character")
				return
			}
		}
	}
}

func (p *parser) checkVM(l loc, s string) {
	if s == "" || len(s) > MaxVMLen {
		p.errorf(l, "is ", strconv.Itoa(len(s)), " bytes long; a VM id is 1 to ", strconv.Itoa(MaxVMLen), " characters of [A-Za-z0-9._:-]")
		return
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			p.errorf(l, quote(s), " contains ", quote(s[i:i+1]), "; a VM id is 1 to ", strconv.Itoa(MaxVMLen), " characters of [A-Za-z0-9._:-]")
			return
		}
	}
}

func (p *parser) checkRuleName(l loc, s string) bool {
	if !policy.ValidName(s) {
		p.errorf(l, quote(s), " is not a rule name (1 to ", strconv.Itoa(policy.MaxNameLen), " characters of [A-Za-z0-9_.-])")
		return false
	}
	return true
}

func (p *parser) checkTimeMS(l loc, ms int64) {
	if ms < 1 || ms > maxTimeMS {
		p.errorf(l, strconv.FormatInt(ms, 10), " is not a time; send milliseconds since the unix epoch")
	}
}

// normalizeHash accepts 1 to 16 hex digits (either case) and returns them
// as 16 lower-case digits.
func normalizeHash(s string) (string, bool) {
	if s == "" || len(s) > 16 {
		return "", false
	}
	h, err := strconv.ParseUint(s, 16, 64)
	if err != nil || strings.ContainsAny(s, "+-xX_") {
		return "", false
	}
	return FormatHash(h), true
}

// FormatHash formats a configuration hash as the reports carry it.
func FormatHash(h uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}
