// Package policies is the admin's policy service: it validates every
// configuration with shared/policy.Parse (the parser the filter runs, so the
// admin refuses exactly what the filter would refuse, with the same
// messages), stores each accepted one as a new immutable version, keeps the
// history with diffs and rollback, and hands every version that becomes
// current to a Publisher (the xDS server that pushes it to Envoy).
package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Publisher receives every policy version that becomes current (save or
// rollback) and, at start, the current version.
type Publisher interface {
	Publish(ctx context.Context, v Version) error
}

// Version is one immutable policy version.
type Version struct {
	Number     int64
	JSON       []byte // the exact plugin configuration (normalized, compact)
	Author     string
	Message    string
	Created    time.Time
	Parent     int64 // the version this one was based on; 0 for the first
	RollbackOf int64 // for a rollback, the version it restored; else 0
}

// Pretty returns the configuration indented for people: one field per line,
// which is what the editor shows and the diff compares.
func (v Version) Pretty() string { return Pretty(v.JSON) }

// Warnings are what policy.Config.Warnings finds in the version: valid,
// but probably not meant (a rule no request reaches, ...).
func (v Version) Warnings() []policy.Warning { return Warnings(v.JSON) }

// Warnings are the findings of policy.Config.Warnings for a configuration
// document, and its overrides that have ended by now; none for one that
// does not parse (its errors say more).
func Warnings(doc []byte) []policy.Warning {
	cfg, err := policy.Parse(doc)
	if err != nil {
		return nil
	}
	return warningsOf(cfg)
}

func warningsOf(cfg *policy.Config) []policy.Warning {
	return append(cfg.Warnings(), cfg.Ended(time.Now().UnixNano())...)
}

// Pretty indents a JSON document with two spaces (and returns it unchanged
// if it is not valid JSON).
func Pretty(doc []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, doc, "", "  "); err != nil {
		return string(doc)
	}
	b.WriteByte('\n')
	return b.String()
}

// Store is the storage the service needs (admin/store implements it).
type Store interface {
	Append(ctx context.Context, base int64, v store.NewVersion) (store.Version, error)
	Current(ctx context.Context) (store.Version, error)
	Get(ctx context.Context, n int64) (store.Version, error)
	List(ctx context.Context, before int64, limit int) ([]store.Version, error)
	ProposeChange(ctx context.Context, c store.NewChange) (store.Change, error)
	Change(ctx context.Context, id int64) (store.Change, error)
	Changes(ctx context.Context, state string, limit int) ([]store.Change, error)
	CloseChange(ctx context.Context, id int64, state, by, reason string, version int64, at time.Time) error
	PolicyTests(ctx context.Context) (store.PolicyTests, error)
	PutPolicyTests(ctx context.Context, base int64, body, author string, now time.Time) (store.PolicyTests, error)
}

// ConflictError is returned when a change is based on a version that is no
// longer current. Its message names the current version.
type ConflictError = store.ConflictError

// ValidationError is returned when a configuration is invalid: Errors are
// the problems exactly as the filter reports them.
type ValidationError struct {
	Errors policy.Errors
}

func (e *ValidationError) Error() string {
	return "invalid configuration:\n" + e.Errors.Error()
}

// ErrNotFound is matched (errors.Is) by the error for a missing version.
var ErrNotFound = errors.New("not found")

// NotFoundError says which version does not exist.
type NotFoundError struct {
	Number  int64
	Current int64
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("version %d does not exist; versions are 1 to %d", e.Number, e.Current)
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// InputError is a bad argument other than the configuration itself: the
// field it names is a request field ("base_version", "message", ...).
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Message }

// Limits.
const (
	// MaxConfigBytes bounds a configuration: 3 MiB, room for about 30,000
	// overrides. The ECDS push carries it in one gRPC message, which Envoy
	// and grpc-go clients (the dev gateway) accept up to 4 MiB by default;
	// an Istio WasmPlugin is a Kubernetes object, which etcd keeps under
	// 1.5 MiB.
	MaxConfigBytes = 3 << 20
	MaxAuthorLen   = 100  // characters
	MaxMessageLen  = 1000 // characters
	DefaultPage    = 50
	MaxPage        = 500
)

// DefaultConfig is version 1 of a new database: one generous per-client
// limit in shadow mode, which never rejects a request. It lets every Envoy
// start with a valid configuration and shows the metrics a real limit would
// produce before anyone enforces one.
const DefaultConfig = `{
  "mode": "shadow",
  "rules": [
    {
      "name": "default-per-ip",
      "limit_keys": ["ip:address"],
      "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 100, "burst": 200}
    }
  ]
}`

// Service is the policy service. It is safe for concurrent use.
type Service struct {
	store Store
	pub   Publisher
	log   *slog.Logger
	now   func() time.Time

	// mu orders saves with their publication: versions reach the
	// Publisher in number order.
	mu      sync.Mutex
	pubMu   sync.Mutex
	pubStat PublishStatus

	initial []byte // version 1 of an empty database (nil: DefaultConfig)

	review atomic.Bool // saves are proposed, and saved once approved (review.go)
	// reviewed limits review to saves that change these policies (or a
	// top-level setting); nil reviews every save (review.go).
	reviewed atomic.Pointer[Scope]

	file atomic.Pointer[fileState] // the file the policy follows (file.go), nil for none

	resetPub  ResetPublisher // receives the resets to push (resets.go), nil for none
	resetMu   sync.Mutex     // orders SyncResets
	resetMark string         // the store's ResetsMark last handed to resetPub
	forgetter FleetForgetter // forgets a global rule's identities in the fleet's backend (resets.go), nil for none
}

// PublishStatus is the outcome of the last publication.
type PublishStatus struct {
	Version int64
	At      time.Time
	Err     error
}

// New returns a service over st. pub may be nil (nothing is pushed).
func New(st Store, pub Publisher, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{store: st, pub: pub, log: logger, now: time.Now}
}

// SetInitialConfig makes cfg, instead of DefaultConfig, version 1 when Start
// finds an empty database. It has no effect on a database that has
// versions. Start refuses an invalid cfg with the parser's errors.
func (s *Service) SetInitialConfig(cfg []byte) { s.initial = cfg }

// SetClock replaces the clock (tests).
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// Start makes sure a current version exists (storing DefaultConfig as
// version 1 in an empty database) and publishes it.
func (s *Service) Start(ctx context.Context) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.store.Current(ctx)
	if errors.Is(err, store.ErrNotFound) {
		initial, what := []byte(DefaultConfig), "the built-in default configuration"
		message, logged := "initial default policy (shadow mode: reports, never rejects)", "created the default policy (shadow mode)"
		if s.initial != nil {
			initial, what, message, logged = s.initial, "the initial policy", "initial policy", "stored the initial policy"
		}
		cfg, perr := policy.Parse(initial)
		if perr != nil {
			return Version{}, fmt.Errorf("%s is invalid: %w", what, perr)
		}
		norm, _ := cfg.MarshalJSON()
		cur, err = s.store.Append(ctx, 0, store.NewVersion{
			JSON: norm, Author: "sluice", Created: s.now(), Message: message,
		})
		var ce *ConflictError
		if errors.As(err, &ce) { // another admin process created it first
			cur, err = s.store.Current(ctx)
		}
		if err == nil {
			s.log.Info(logged, "version", cur.Number)
		}
	}
	if err != nil {
		return Version{}, fmt.Errorf("reading the current policy: %w", err)
	}
	v := fromStore(cur)
	if _, perr := policy.Parse(v.JSON); perr != nil {
		s.skipInvalid(v, perr)
		return v, nil
	}
	if err := s.publish(ctx, v); err != nil {
		return v, err
	}
	return v, nil
}

// skipInvalid records that the current version v, stored by an earlier
// Sluice whose filter accepted it, is refused by this one's (a check
// added since, such as UTF-8). It is not pushed, so the nodes keep what
// they run; the admin starts anyway, so that a corrected policy can be
// saved, and the policy page shows this error until then.
func (s *Service) skipInvalid(v Version, perr error) {
	err := fmt.Errorf("version %d, the current policy, is refused by this version's filter and was not pushed (nodes keep what they run); save a corrected policy: %w", v.Number, perr)
	s.pubMu.Lock()
	s.pubStat = PublishStatus{Version: v.Number, At: s.now(), Err: err}
	s.pubMu.Unlock()
	s.log.Error("the current policy is invalid", "version", v.Number, "err", perr)
}

func (s *Service) publish(ctx context.Context, v Version) error {
	var err error
	if s.pub != nil {
		err = s.pub.Publish(ctx, v)
	}
	s.pubMu.Lock()
	s.pubStat = PublishStatus{Version: v.Number, At: s.now(), Err: err}
	s.pubMu.Unlock()
	if err != nil {
		s.log.Error("publishing the policy failed", "version", v.Number, "err", err)
		return fmt.Errorf("publishing version %d: %w", v.Number, err)
	}
	s.log.Info("published policy", "version", v.Number)
	return nil
}

// LastPublish reports the last publication and its error, if any.
func (s *Service) LastPublish() PublishStatus {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	return s.pubStat
}

// Current returns the current version.
func (s *Service) Current(ctx context.Context) (Version, error) {
	v, err := s.store.Current(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return Version{}, &NotFoundError{Number: 1}
	}
	if err != nil {
		return Version{}, err
	}
	return fromStore(v), nil
}

// Get returns version n.
func (s *Service) Get(ctx context.Context, n int64) (Version, error) {
	v, err := s.store.Get(ctx, n)
	if errors.Is(err, store.ErrNotFound) {
		cur, _ := s.store.Current(ctx)
		return Version{}, &NotFoundError{Number: n, Current: cur.Number}
	}
	if err != nil {
		return Version{}, err
	}
	return fromStore(v), nil
}

// Page is one page of the history, newest first.
type Page struct {
	Versions   []Version
	NextBefore int64 // pass as before to get the next page; 0 when this is the last
}

// List returns up to limit versions numbered below before (0: from the
// newest). limit 0 means DefaultPage.
func (s *Service) List(ctx context.Context, before int64, limit int) (Page, error) {
	switch {
	case before < 0:
		return Page{}, &InputError{Field: "before", Message: fmt.Sprintf("%d is negative; pass a version number, or 0 for the newest", before)}
	case limit < 0 || limit > MaxPage:
		return Page{}, &InputError{Field: "limit", Message: fmt.Sprintf("%d is out of range; use 1 to %d", limit, MaxPage)}
	case limit == 0:
		limit = DefaultPage
	}
	vs, err := s.store.List(ctx, before, limit+1)
	if err != nil {
		return Page{}, err
	}
	var p Page
	if len(vs) > limit {
		vs = vs[:limit]
		p.NextBefore = vs[limit-1].Number
	}
	for _, v := range vs {
		p.Versions = append(p.Versions, fromStore(v))
	}
	return p, nil
}

// Diff compares two versions.
type Diff struct {
	From, To Version // From.Number is 0 when comparing with nothing
	Hunks    []Hunk
}

// Unified renders the diff as a unified diff.
func (d Diff) Unified() string {
	return Unified(fmt.Sprintf("v%d", d.From.Number), fmt.Sprintf("v%d", d.To.Number), d.Hunks)
}

// Diff compares version from with version to, line by line, on the pretty
// form. from may be 0: everything in to is then added.
func (s *Service) Diff(ctx context.Context, from, to int64) (Diff, error) {
	if from < 0 {
		return Diff{}, &InputError{Field: "from", Message: fmt.Sprintf("%d is not a version number", from)}
	}
	var d Diff
	var err error
	if from > 0 {
		if d.From, err = s.Get(ctx, from); err != nil {
			return Diff{}, err
		}
	}
	if d.To, err = s.Get(ctx, to); err != nil {
		return Diff{}, err
	}
	old := ""
	if from > 0 {
		old = d.From.Pretty()
	}
	d.Hunks = LineDiff(old, d.To.Pretty())
	return d, nil
}

// SaveRequest is a new configuration based on version Base.
type SaveRequest struct {
	Base    int64
	JSON    []byte
	Author  string
	Message string
	Scope   Scope // the policies the author may change (empty: all)
	// SkipTests saves without running the saved tests (the caller
	// records that it did).
	SkipTests bool
	// approvedBy is the reviewer whose approval saves the change (Approve):
	// with review required, a save without one is only proposed.
	approvedBy string
	// Tests, when set, replaces the saved tests in the same save: the
	// configuration must pass these instead of the saved ones, and they
	// are saved with it ("" removes them). SkipTests does not apply.
	Tests *string
}

// Validate parses a configuration as the filter would and returns it
// normalized, or a *ValidationError.
func Validate(doc []byte) ([]byte, error) {
	norm, _, err := Check(doc)
	return norm, err
}

// Check is Validate, also returning what the configuration's Warnings find
// (from the same parse).
func Check(doc []byte) (norm []byte, warnings []policy.Warning, err error) {
	if len(doc) > MaxConfigBytes {
		return nil, nil, &ValidationError{Errors: policy.Errors{{Message: fmt.Sprintf(
			"the configuration is %d bytes; the limit is %d bytes", len(doc), MaxConfigBytes)}}}
	}
	cfg, err := policy.Parse(doc)
	refused := refuseResets(doc)
	if err != nil || refused != nil {
		var es policy.Errors
		if err != nil && !errors.As(err, &es) {
			es = policy.Errors{{Message: err.Error()}}
		}
		if refused != nil {
			es = append(es, *refused)
		}
		return nil, nil, &ValidationError{Errors: es}
	}
	norm, err = cfg.MarshalJSON()
	return norm, warningsOf(cfg), err
}

// Save validates the configuration, checks it against the saved tests
// (unless SkipTests), stores it as version Base+1 and publishes it.
// Errors: *ValidationError (nothing stored or published), *TestsFailedError,
// *ConflictError (Base is stale), *InputError, *ManagedError (the policy
// follows a file).
func (s *Service) Save(ctx context.Context, r SaveRequest) (Version, error) {
	if err := s.managed("save"); err != nil {
		return Version{}, err
	}
	return s.save(ctx, r, false)
}

// save is Save; fromFile saves the followed file's content, reviewed in
// Git: it is never proposed for review here.
func (s *Service) save(ctx context.Context, r SaveRequest, fromFile bool) (Version, error) {
	author, msg, err := cleanMeta(r.Author, r.Message)
	if err != nil {
		return Version{}, err
	}
	if r.Base < 0 {
		return Version{}, &InputError{Field: "base_version", Message: fmt.Sprintf("%d is not a version number", r.Base)}
	}
	norm, err := Validate(r.JSON)
	if err != nil {
		return Version{}, err
	}
	if err := s.checkScope(ctx, r.Scope, r.Base, norm); err != nil {
		return Version{}, err
	}
	var tests *string
	if r.Tests != nil {
		body, err := checkGivenTests(norm, *r.Tests)
		if err != nil {
			return Version{}, err
		}
		tests = &body
	} else if !r.SkipTests {
		if err := s.checkTests(ctx, norm); err != nil {
			return Version{}, err
		}
	}
	if r.approvedBy == "" && !fromFile && s.needsReview(ctx, r.Base, norm) {
		return Version{}, s.propose(ctx, r.Base, norm, tests, author, msg)
	}
	v, err := s.append(ctx, r.Base, store.NewVersion{JSON: norm, Author: author, Message: msg})
	if err != nil || tests == nil {
		return v, err
	}
	return v, s.replaceTests(ctx, v, *tests, author)
}

// CheckScope is Save's scope check without saving: it refuses, with a
// *ScopeError, a draft based on version base that changes what sc does not
// allow (a trial to be started or promoted). An invalid draft passes:
// saving it reports why.
func (s *Service) CheckScope(ctx context.Context, sc Scope, base int64, draft []byte) error {
	if !sc.Restricted() {
		return nil
	}
	norm, err := Validate(draft)
	if err != nil {
		return nil
	}
	return s.checkScope(ctx, sc, base, norm)
}

// checkScope refuses a change of version base into norm that sc does not
// allow. It compares with base, the version the author started from: if
// another save came since, the append refuses the stale base anyway.
func (s *Service) checkScope(ctx context.Context, sc Scope, base int64, norm []byte) error {
	if !sc.Restricted() {
		return nil
	}
	var before []byte
	if base > 0 {
		var err error
		if before, err = s.normalized(ctx, base); err != nil {
			return err
		}
	}
	return CheckScope(sc, before, norm)
}

// normalized returns version n's configuration as Validate writes it.
func (s *Service) normalized(ctx context.Context, n int64) ([]byte, error) {
	v, err := s.Get(ctx, n)
	if err != nil {
		return nil, err
	}
	return Validate(v.JSON)
}

// RollbackRequest restores version To as a new version based on Base.
type RollbackRequest struct {
	To     int64
	Base   int64
	Author string
	Scope  Scope // the policies the author may change (empty: all)
}

// Rollback stores a copy of version To as a new version with message
// "rollback to vN" and publishes it. The old configuration is validated
// again: one that today's parser refuses is not restored.
func (s *Service) Rollback(ctx context.Context, r RollbackRequest) (Version, error) {
	if err := s.managed("rollback"); err != nil {
		return Version{}, err
	}
	author, _, err := cleanMeta(r.Author, "")
	if err != nil {
		return Version{}, err
	}
	if r.To <= 0 {
		return Version{}, &InputError{Field: "to", Message: fmt.Sprintf("%d is not a version number", r.To)}
	}
	if r.Base <= 0 {
		return Version{}, &InputError{Field: "base_version", Message: fmt.Sprintf("%d is not a version number", r.Base)}
	}
	if r.To == r.Base {
		return Version{}, &InputError{Field: "to", Message: fmt.Sprintf("version %d is the version you are on; pick an older one", r.To)}
	}
	norm, err := s.normalized(ctx, r.To)
	if err != nil {
		return Version{}, err
	}
	if r.Scope.Restricted() {
		return s.rollbackInScope(ctx, r, author, norm)
	}
	return s.append(ctx, r.Base, store.NewVersion{
		JSON: norm, Author: author, Message: fmt.Sprintf("rollback to v%d", r.To), RollbackOf: r.To,
	})
}

// rollbackInScope restores, over version r.Base, the policies r.Scope
// allows as they were in version r.To (old, normalized), and keeps
// everything else: another team's changes since are not undone. The new
// version is not a copy of r.To, so it is not marked as its rollback.
func (s *Service) rollbackInScope(ctx context.Context, r RollbackRequest, author string, old []byte) (Version, error) {
	current, err := s.normalized(ctx, r.Base)
	if err != nil {
		return Version{}, err
	}
	merged, err := RestoreInScope(r.Scope, current, old)
	if err != nil {
		return Version{}, err
	}
	norm, err := Validate(merged)
	if err != nil {
		return Version{}, err
	}
	if err := CheckScope(r.Scope, current, norm); err != nil {
		return Version{}, err
	}
	return s.append(ctx, r.Base, store.NewVersion{
		JSON: norm, Author: author, Message: fmt.Sprintf("rollback of policies %s to v%d", r.Scope, r.To),
	})
}

func (s *Service) append(ctx context.Context, base int64, nv store.NewVersion) (Version, error) {
	nv.Created = s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, err := s.store.Append(ctx, base, nv)
	if err != nil {
		return Version{}, err
	}
	v := fromStore(sv)
	s.log.Info("saved policy", "version", v.Number, "author", v.Author, "message", v.Message)
	// The version is stored; a failed push is logged and reported by
	// LastPublish, and the next save or restart pushes again.
	_ = s.publish(ctx, v)
	return v, nil
}

// cleanMeta trims and checks the author and message.
func cleanMeta(author, msg string) (string, string, error) {
	author = strings.TrimSpace(author)
	if author == "" {
		author = "admin"
	}
	if n := utf8.RuneCountInString(author); n > MaxAuthorLen {
		return "", "", &InputError{Field: "author", Message: fmt.Sprintf("is %d characters long; the limit is %d", n, MaxAuthorLen)}
	}
	if bad := firstBadRune(author, false); bad != "" {
		return "", "", &InputError{Field: "author", Message: "contains " + bad + "; use printable characters"}
	}
	msg = strings.TrimSpace(strings.ReplaceAll(msg, "\r\n", "\n"))
	if n := utf8.RuneCountInString(msg); n > MaxMessageLen {
		return "", "", &InputError{Field: "message", Message: fmt.Sprintf("is %d characters long; the limit is %d", n, MaxMessageLen)}
	}
	if bad := firstBadRune(msg, true); bad != "" {
		return "", "", &InputError{Field: "message", Message: "contains " + bad + "; use printable characters"}
	}
	return author, msg, nil
}

func firstBadRune(s string, newlines bool) string {
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	for _, r := range s {
		if newlines && r == '\n' {
			continue
		}
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Sprintf("the control character %U", r)
		}
	}
	return ""
}

func fromStore(v store.Version) Version {
	return Version{
		Number: v.Number, JSON: v.JSON, Author: v.Author, Message: v.Message,
		Created: v.Created, Parent: v.Parent, RollbackOf: v.RollbackOf,
	}
}
