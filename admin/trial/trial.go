// Package trial builds and runs a shadow trial of a draft policy: the
// current policy, unchanged, plus the draft's rules in shadow mode under
// names of their own, so they count what they would reject on live traffic
// with buckets of their own and never change enforcement.
//
// admin/xds pushes a trial's configuration (Pusher) without storing a
// version; Service.Publisher follows the versions saved during a trial.
package trial

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/policyedit"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Prefix starts the name of every trial rule and trial policy: the draft's
// rule "premium" runs as "trial-premium" in the policy "trial-<policy>".
// Bucket state is keyed by rule name, so trial rules have buckets of their
// own. A current policy that already uses the prefix cannot be tried
// against.
const Prefix = "trial-"

// Durations.
const (
	DefaultDuration = 15 * time.Minute
	MaxDuration     = 24 * time.Hour
)

// Name is the trial name of a draft rule or policy.
func Name(draftName string) string { return Prefix + draftName }

// Pair is a draft rule and its trial rule.
type Pair struct {
	Draft, Trial string
}

// Merge returns the configuration pushed during a trial: current (the
// current version's configuration) with, after its own policies, each
// policy of draft renamed Name(policy) and its rules renamed Name(rule) in
// shadow mode without marking ("shadow_mark": false: the trial changes
// nothing upstream sees, not even the shadow header). An invalid draft is
// refused like a save (a *policies.ValidationError with the parser's
// errors); so is a draft whose trial names would be too long or collide,
// or with a global rule (a trial's leases would spend the fleet's real
// limits). A draft's exempt rules are tried like its other rules: in shadow
// mode an exempt rule exempts requests from shadow rules only, so the draft
// is evaluated with its own exemptions and enforcement does not change.
// A draft rule enforced on a share of its identities ("enforce_percent")
// is tried as if enforced on all of them: its would-be rejections are
// every identity's.
func Merge(current, draft []byte) ([]byte, []Pair, error) {
	normDraft, err := policies.Validate(draft)
	if err != nil {
		return nil, nil, err
	}
	normCur, err := policies.Validate(current)
	if err != nil {
		return nil, nil, fmt.Errorf("the current policy: %w", err)
	}
	cur, err := policy.Parse(normCur)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range cur.Policies {
		for _, r := range p.Rules {
			if len(r.Name) >= len(Prefix) && r.Name[:len(Prefix)] == Prefix {
				return nil, nil, fmt.Errorf("the current policy has a rule named %q: names starting with %q are kept for trials", r.Name, Prefix)
			}
		}
	}
	var errs policy.Errors
	root, _ := policyedit.ParseObject(normCur)
	droot, _ := policyedit.ParseObject(normDraft)
	var curPols, draftPols []json.RawMessage
	if v, ok := root.Get("policies"); ok {
		json.Unmarshal(v, &curPols)
	}
	if v, ok := droot.Get("policies"); ok {
		json.Unmarshal(v, &draftPols)
	}
	var pairs []Pair
	for i, raw := range draftPols {
		p, _ := policyedit.ParseObject(raw)
		ppath := "policies[" + strconv.Itoa(i) + "]"
		p.Set("name", trialName(ppath+".name", p.String("name"), &errs))
		var rules []json.RawMessage
		if v, ok := p.Get("rules"); ok {
			json.Unmarshal(v, &rules)
		}
		for j, rr := range rules {
			r, _ := policyedit.ParseObject(rr)
			rpath := ppath + ".rules[" + strconv.Itoa(j) + "]"
			if r.String("scope") == "global" {
				errs = append(errs, policy.FieldError{Path: rpath + ".scope", Message: "a global rule cannot be tried in shadow: its leases would spend the fleet's real limit; try it as a local rule"})
			}
			name := r.String("name")
			tn := trialName(rpath+".name", name, &errs)
			r.Set("name", tn)
			r.Set("mode", policy.ModeShadow)
			r.Set("shadow_mark", false) // a trial leaves the upstream request as it is
			r.Delete("enforce_percent") // counted as if enforced on every identity
			rules[j], _ = r.MarshalJSON()
			pairs = append(pairs, Pair{Draft: name, Trial: tn})
		}
		p.Set("rules", rules)
		raw, _ := p.MarshalJSON()
		curPols = append(curPols, raw)
	}
	if len(errs) > 0 {
		return nil, nil, &policies.ValidationError{Errors: errs}
	}
	root.Set("policies", curPols)
	merged, _ := root.MarshalJSON()
	if _, err := policies.Validate(merged); err != nil {
		return nil, nil, err
	}
	return merged, pairs, nil
}

func trialName(path, name string, errs *policy.Errors) string {
	tn := Name(name)
	if len(tn) > policy.MaxNameLen {
		*errs = append(*errs, policy.FieldError{Path: path, Message: fmt.Sprintf(
			"%q is too long to try: its trial name %q would exceed %d characters", name, tn, policy.MaxNameLen)})
	}
	return tn
}

// Trial is a running trial.
type Trial struct {
	ID      int64
	Author  string
	Base    int64  // the current version when it started (promotion saves on it)
	Over    int64  // the version the trial rules are pushed over now (Base, or a version saved since)
	Draft   []byte // the draft as given
	Config  []byte // what was pushed (Merge)
	Pairs   []Pair
	Started time.Time
	Ends    time.Time
}

// RunningError refuses a second trial while one runs.
type RunningError struct{ Running Trial }

func (e *RunningError) Error() string {
	return fmt.Sprintf("trial %d by %s is running until %s; end or promote it first",
		e.Running.ID, e.Running.Author, e.Running.Ends.UTC().Format("15:04:05 UTC"))
}

// ErrNoTrial is returned when no trial runs.
var ErrNoTrial = errors.New("no trial is running")

// Pusher pushes a trial's configuration, and the current version again
// when the trial ends.
type Pusher interface {
	PushTrial(ctx context.Context, base int64, config []byte) error
	EndTrial(ctx context.Context) error
}

// Policies is what a trial needs of the policy service.
type Policies interface {
	Current(ctx context.Context) (policies.Version, error)
	Save(ctx context.Context, r policies.SaveRequest) (policies.Version, error)
}

// Service runs at most one trial at a time.
type Service struct {
	pol  Policies
	push Pusher
	now  func() time.Time

	mu      sync.Mutex
	running *Trial
	timer   *time.Timer
	lastID  int64
}

// NewService returns a trial service; now nil means time.Now.
func NewService(pol Policies, push Pusher, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{pol: pol, push: push, now: now}
}

// SetPolicies sets the policy service, for a Service created before it
// (the policy service publishes through Publisher). Call it before serving.
func (s *Service) SetPolicies(pol Policies) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pol = pol
}

// Start pushes the current policy plus the draft's rules in shadow for d
// (DefaultDuration when 0). It refuses while another trial runs
// (*RunningError), an invalid draft (*policies.ValidationError), and a
// duration over MaxDuration (*policies.InputError).
func (s *Service) Start(ctx context.Context, draft []byte, d time.Duration, author string) (Trial, error) {
	return s.StartOn(ctx, 0, draft, d, author)
}

// StartOn is Start for a draft written on version base: when base is not
// the current version (someone saved since), it is refused with a
// *policies.ConflictError, as a save would be, since promoting the draft
// later would undo that change. base 0 takes the current version.
func (s *Service) StartOn(ctx context.Context, base int64, draft []byte, d time.Duration, author string) (Trial, error) {
	if d == 0 {
		d = DefaultDuration
	}
	if d < 0 || d > MaxDuration {
		return Trial{}, &policies.InputError{Field: "duration", Message: fmt.Sprintf("%v is not between 1s and %v", d, MaxDuration)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		return Trial{}, &RunningError{Running: *s.running}
	}
	cur, err := s.pol.Current(ctx)
	if err != nil {
		return Trial{}, err
	}
	if base != 0 && base != cur.Number {
		return Trial{}, &policies.ConflictError{Base: base, Current: cur.Number}
	}
	merged, pairs, err := Merge(cur.JSON, draft)
	if err != nil {
		return Trial{}, err
	}
	if err := s.push.PushTrial(ctx, cur.Number, merged); err != nil {
		return Trial{}, fmt.Errorf("pushing the trial: %w", err)
	}
	s.lastID++
	now := s.now()
	t := &Trial{ID: s.lastID, Author: author, Base: cur.Number, Over: cur.Number, Draft: append([]byte(nil), draft...), Config: merged,
		Pairs: pairs, Started: now, Ends: now.Add(d)}
	s.running = t
	id := t.ID
	s.timer = time.AfterFunc(d, func() { s.expire(id) })
	return *t, nil
}

// Running returns the running trial.
func (s *Service) Running() (Trial, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return Trial{}, false
	}
	return *s.running, true
}

func (s *Service) expire(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil || s.running.ID != id {
		return
	}
	s.endLocked(context.Background())
}

// endLocked removes the trial rules with a push of the current version.
func (s *Service) endLocked(ctx context.Context) error {
	s.running = nil
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	return s.push.EndTrial(ctx)
}

// Stop ends the running trial early.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return ErrNoTrial
	}
	return s.endLocked(ctx)
}

// Promote saves the trial's draft as a normal version based on the
// version the trial started from (a *policies.ConflictError when someone
// saved since) and ends the trial. The save's own publication replaces the
// trial's configuration, so the trial is forgotten before saving (the
// lock is not held during the save, whose publication reaches Publisher)
// and restored if the save fails.
func (s *Service) Promote(ctx context.Context, author, message string) (policies.Version, error) {
	s.mu.Lock()
	t := s.running
	if t == nil {
		s.mu.Unlock()
		return policies.Version{}, ErrNoTrial
	}
	s.running = nil
	s.mu.Unlock()
	if message == "" {
		message = fmt.Sprintf("promoted from trial %d", t.ID)
	}
	v, err := s.pol.Save(ctx, policies.SaveRequest{Base: t.Base, JSON: t.Draft, Author: author, Message: message})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.running == nil && s.now().Before(t.Ends) {
			s.running = t // its timer still runs and ends it on time
		} else if s.running == nil {
			s.endLocked(ctx)
		}
		return v, err
	}
	if s.running == nil && s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	return v, nil
}

// Publisher wraps next (the publisher of every new current version) so
// that a version saved during a trial is published and then pushed again
// with the trial's rules, merged anew: the trial goes on over the new
// current policy. Promotion still saves on the trial's base, so it then
// answers 409. A new version the draft can no longer be merged with (it
// took a "trial-" name) ends the trial.
func (s *Service) Publisher(next policies.Publisher) policies.Publisher {
	return followingPublisher{s: s, next: next}
}

type followingPublisher struct {
	s    *Service
	next policies.Publisher
}

func (p followingPublisher) Publish(ctx context.Context, v policies.Version) error {
	if p.next != nil {
		if err := p.next.Publish(ctx, v); err != nil {
			return err
		}
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.running
	if t == nil || v.Number <= t.Over {
		return nil
	}
	merged, pairs, err := Merge(v.JSON, t.Draft)
	if err != nil {
		s.endLocked(ctx)
		return nil
	}
	if err := s.push.PushTrial(ctx, v.Number, merged); err != nil {
		s.endLocked(ctx)
		return fmt.Errorf("pushing the trial over version %d: %w", v.Number, err)
	}
	t.Over, t.Config, t.Pairs = v.Number, merged, pairs
	return nil
}
