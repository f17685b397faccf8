package trial

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

const current = `{"policies":[{"name":"tiers","rules":[
 {"name":"premium","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":20}}]}]}`

const draft = `{"policies":[{"name":"tiers","rules":[
 {"name":"premium","mode":"enforce","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":5,"burst":10}}]}]}`

func TestMergeAddsTheDraftInShadowUnderTrialNames(t *testing.T) {
	merged, pairs, err := Merge([]byte(current), []byte(draft))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(merged)
	if err != nil {
		t.Fatalf("the merged configuration is invalid: %v", err)
	}
	if len(cfg.Policies) != 2 || cfg.Policies[1].Name != "trial-tiers" {
		t.Fatalf("policies %+v", cfg.Policies)
	}
	enforced, tried := cfg.RuleByName("premium"), cfg.RuleByName("trial-premium")
	if enforced == nil || enforced.Mode != policy.ModeEnforce || enforced.TokenBucket.TokensPerSecond != 10 {
		t.Errorf("the enforced rule changed: %+v", enforced)
	}
	if tried == nil || tried.Mode != policy.ModeShadow || !tried.Unmarked || tried.TokenBucket.TokensPerSecond != 5 {
		t.Errorf("the trial rule should be an unmarked shadow rule with the draft's limits: %+v", tried)
	}
	if enforced != nil && enforced.Unmarked {
		t.Errorf("the enforced rule became unmarked: %+v", enforced)
	}
	if len(pairs) != 1 || pairs[0] != (Pair{"premium", "trial-premium"}) {
		t.Errorf("pairs %v", pairs)
	}
}

func TestADraftRuleEnforcedOnAShareIsTriedOnEveryIdentity(t *testing.T) {
	partial := strings.Replace(draft, `"name":"premium"`, `"name":"premium","enforce_percent":20`, 1)
	if partial == draft {
		t.Fatal("the draft has no rule named premium")
	}
	merged, _, err := Merge([]byte(current), []byte(partial))
	if err != nil {
		t.Fatalf("a draft rule with enforce_percent: %v", err)
	}
	cfg, err := policy.Parse(merged)
	if err != nil {
		t.Fatalf("the merged configuration is invalid: %v", err)
	}
	if tried := cfg.RuleByName("trial-premium"); tried == nil || tried.EnforcePercent != nil || tried.Mode != policy.ModeShadow {
		t.Errorf("the trial rule should be a shadow rule without enforce_percent: %+v", tried)
	}
}

// A draft that keeps a rule's limit_headers (Kong's per-minute fields,
// say) is tried beside the current rule of the same names: the trial's
// copy is a shadow rule, which sends no fields.
func TestADraftKeepingARulesOwnFieldsCanBeTried(t *testing.T) {
	const withFields = `{"policies":[{"name":"api","rules":[{"name":"per-key","limit_keys":["header:x-api-key"],` +
		`"limit_headers":{"remaining":"x-ratelimit-remaining-minute"},"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":60}}]}]}`
	raised := strings.Replace(withFields, `"burst":60`, `"burst":120`, 1)
	merged, _, err := Merge([]byte(withFields), []byte(raised))
	if err != nil {
		t.Fatalf("a draft raising a rule with its own fields: %v", err)
	}
	cfg, err := policy.Parse(merged)
	if err != nil {
		t.Fatal(err)
	}
	if tried := cfg.RuleByName("trial-per-key"); tried == nil || tried.Mode != policy.ModeShadow || tried.TokenBucket.Burst != 120 {
		t.Errorf("the trial rule: %+v", tried)
	}
}

func TestMergeRefusesLikeASave(t *testing.T) {
	bad := strings.Replace(draft, `"burst":10`, `"burst":1`, 1)
	_, _, err := Merge([]byte(current), []byte(bad))
	var ve *policies.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(ve.Errors.Error(), "policies[0].rules[0].algorithm_config.burst") {
		t.Fatalf("an invalid draft: %v", err)
	}
	long := strings.Replace(draft, `"name":"premium"`, `"name":"`+strings.Repeat("p", 60)+`"`, 1)
	if _, _, err := Merge([]byte(current), []byte(long)); !errors.As(err, &ve) || !strings.Contains(err.Error(), "too long to try") {
		t.Errorf("a name too long for its trial name: %v", err)
	}
	taken := strings.Replace(current, `"name":"premium"`, `"name":"trial-premium"`, 1)
	if _, _, err := Merge([]byte(taken), []byte(draft)); err == nil || !strings.Contains(err.Error(), "kept for trials") {
		t.Errorf("a current rule using the prefix: %v", err)
	}
}

type fakePolicies struct {
	mu    sync.Mutex
	cur   policies.Version
	saved []policies.SaveRequest
}

func (f *fakePolicies) Current(context.Context) (policies.Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur, nil
}

func (f *fakePolicies) Save(_ context.Context, r policies.SaveRequest) (policies.Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Base != f.cur.Number {
		return policies.Version{}, &policies.ConflictError{Base: r.Base, Current: f.cur.Number}
	}
	f.saved = append(f.saved, r)
	f.cur = policies.Version{Number: f.cur.Number + 1, JSON: r.JSON}
	return f.cur, nil
}

type fakePusher struct {
	mu     sync.Mutex
	pushed [][]byte
	ended  chan struct{}
}

func (p *fakePusher) PushTrial(_ context.Context, _ int64, cfg []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pushed = append(p.pushed, cfg)
	return nil
}

func (p *fakePusher) EndTrial(context.Context) error {
	p.ended <- struct{}{}
	return nil
}

func newService() (*Service, *fakePolicies, *fakePusher) {
	pol := &fakePolicies{cur: policies.Version{Number: 4, JSON: []byte(current)}}
	push := &fakePusher{ended: make(chan struct{}, 4)}
	return NewService(pol, push, nil), pol, push
}

func TestOneTrialAtATimeAndItExpires(t *testing.T) {
	s, _, push := newService()
	ctx := context.Background()
	tr, err := s.Start(ctx, []byte(draft), 50*time.Millisecond, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Base != 4 || len(push.pushed) != 1 {
		t.Fatalf("trial %+v, pushes %d", tr, len(push.pushed))
	}
	_, err = s.Start(ctx, []byte(draft), 0, "bob")
	var re *RunningError
	if !errors.As(err, &re) || re.Running.ID != tr.ID || !strings.Contains(err.Error(), "trial 1 by alice") {
		t.Fatalf("a second trial: %v", err)
	}
	select {
	case <-push.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the trial did not expire")
	}
	if _, ok := s.Running(); ok {
		t.Error("still running after expiry")
	}
	if _, err := s.Start(ctx, []byte(draft), time.Minute, "bob"); err != nil {
		t.Errorf("a trial after the first expired: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); !errors.Is(err, ErrNoTrial) {
		t.Errorf("stopping twice: %v", err)
	}
}

func TestPromoteSavesTheDraftOnItsBase(t *testing.T) {
	s, pol, _ := newService()
	ctx := context.Background()
	if _, err := s.Start(ctx, []byte(draft), time.Minute, "alice"); err != nil {
		t.Fatal(err)
	}
	v, err := s.Promote(ctx, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if v.Number != 5 || len(pol.saved) != 1 || string(pol.saved[0].JSON) != draft || pol.saved[0].Message != "promoted from trial 1" {
		t.Fatalf("saved %+v as v%d", pol.saved, v.Number)
	}
	if _, ok := s.Running(); ok {
		t.Error("still running after promotion")
	}
	// Someone saved during a trial: promotion is refused like a stale save.
	if _, err := s.Start(ctx, []byte(draft), time.Minute, "alice"); err != nil {
		t.Fatal(err)
	}
	pol.Save(ctx, policies.SaveRequest{Base: 5, JSON: []byte(current)})
	var ce *policies.ConflictError
	if _, err := s.Promote(ctx, "alice", "m"); !errors.As(err, &ce) {
		t.Fatalf("a stale promotion: %v", err)
	}
	if _, ok := s.Running(); !ok {
		t.Error("a refused promotion ended the trial")
	}
	s.Stop(ctx)
}

func TestStartRefusesAnInvalidDraftAndDuration(t *testing.T) {
	s, _, push := newService()
	ctx := context.Background()
	var ve *policies.ValidationError
	if _, err := s.Start(ctx, []byte(`{"rules":[]}x`), 0, "a"); !errors.As(err, &ve) {
		t.Errorf("an invalid draft: %v", err)
	}
	var ie *policies.InputError
	if _, err := s.Start(ctx, []byte(draft), 25*time.Hour, "a"); !errors.As(err, &ie) || ie.Field != "duration" {
		t.Errorf("too long: %v", err)
	}
	if len(push.pushed) != 0 {
		t.Errorf("a refused trial was pushed")
	}
}

func TestAVersionSavedDuringATrialIsPushedWithTheTrialRules(t *testing.T) {
	s, _, push := newService()
	ctx := context.Background()
	if _, err := s.Start(ctx, []byte(draft), time.Minute, "alice"); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	next := strings.Replace(current, `"burst":20`, `"burst":30`, 1)
	if err := s.Publisher(nil).Publish(ctx, policies.Version{Number: 5, JSON: []byte(next)}); err != nil {
		t.Fatal(err)
	}
	if len(push.pushed) != 2 {
		t.Fatalf("%d trial pushes, want the start and the re-push", len(push.pushed))
	}
	cfg, err := policy.Parse(push.pushed[1])
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.RuleByName("premium"); r == nil || r.TokenBucket.Burst != 30 {
		t.Errorf("the re-push does not carry the new version: %+v", r)
	}
	if r := cfg.RuleByName("trial-premium"); r == nil || r.Mode != policy.ModeShadow {
		t.Errorf("the re-push lost the trial rule: %+v", r)
	}
	if tr, _ := s.Running(); tr.Over != 5 || tr.Base != 4 {
		t.Errorf("trial over v%d based on v%d, want over 5 based on 4", tr.Over, tr.Base)
	}
}

func TestStartOnAStaleBaseIsRefusedLikeASave(t *testing.T) {
	s, _, push := newService()
	var ce *policies.ConflictError
	if _, err := s.StartOn(context.Background(), 3, []byte(draft), time.Minute, "alice"); !errors.As(err, &ce) || ce.Current != 4 {
		t.Fatalf("a draft written on v3 while v4 is current: %v", err)
	}
	if len(push.pushed) != 0 {
		t.Error("a refused trial was pushed")
	}
	tr, err := s.StartOn(context.Background(), 4, []byte(draft), time.Minute, "alice")
	if err != nil || tr.Base != 4 {
		t.Fatalf("on the current version: %+v %v", tr, err)
	}
	s.Stop(context.Background())
}

func TestTheTrialsPushedConfigurationCountsWithoutMarkingUpstream(t *testing.T) {
	s, _, push := newService()
	ctx := context.Background()
	if _, err := s.Start(ctx, []byte(draft), time.Minute, "alice"); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	push.mu.Lock()
	pushed := push.pushed
	push.mu.Unlock()
	if len(pushed) != 1 {
		t.Fatalf("%d pushes, want 1", len(pushed))
	}
	cfg, err := policy.Parse(pushed[0])
	if err != nil {
		t.Fatalf("the pushed configuration is invalid: %v", err)
	}
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			trial := strings.HasPrefix(r.Name, Prefix)
			if trial != r.Unmarked || (trial && r.Mode != policy.ModeShadow) {
				t.Errorf("rule %q: mode %s, unmarked %v; want trial rules (and only they) in shadow without marking", r.Name, r.Mode, r.Unmarked)
			}
		}
	}
	if !strings.Contains(string(pushed[0]), `"shadow_mark":false`) {
		t.Errorf("the pushed configuration does not say shadow_mark false: %s", pushed[0])
	}
}

// TestADraftWithAnExemptRuleIsTriedWithoutChangingEnforcement tries a draft
// exempting health checks: the merged configuration answers every request
// as the current one alone does (the enforced bucket still rejects health
// checks), while the draft's exemption (a policy of its own) keeps the
// draft's limit rule off them.
func TestADraftWithAnExemptRuleIsTriedWithoutChangingEnforcement(t *testing.T) {
	exempt := strings.Replace(draft, `{"policies":[`, `{"policies":[{"name":"gate","rules":[{"name":"health","action":"exempt","match":{"path":"/healthz"}}]},`, 1)
	merged, pairs, err := Merge([]byte(current), []byte(exempt))
	if err != nil {
		t.Fatalf("a draft with an exempt rule is refused: %v", err)
	}
	if len(pairs) != 2 || pairs[0] != (Pair{"health", "trial-health"}) {
		t.Errorf("pairs %v", pairs)
	}
	cur, err := policy.Parse([]byte(current))
	if err != nil {
		t.Fatal(err)
	}
	tried, err := policy.Parse(merged)
	if err != nil {
		t.Fatalf("the merged configuration is invalid: %v", err)
	}
	if r := tried.RuleByName("trial-health"); r == nil || r.Mode != policy.ModeShadow || r.Action != policy.ActionExempt {
		t.Fatalf("the draft's exempt rule should be tried in shadow: %+v", r)
	}
	curRun, triedRun := simulation(cur), simulation(tried)
	rejected, exempted := 0, 0
	for i := range 30 {
		r := simulate.Request{Method: "GET", Path: "/healthz", Host: "api", Headers: map[string]string{"x-api-key": "k"}, ClientAddress: "10.0.0.1:5000"}
		if i%3 == 2 {
			r.Path = "/orders"
		}
		want, got := curRun(r), triedRun(r)
		if got.Status != want.Status || got.Rule != want.Rule || !slices.Equal(got.Headers, want.Headers) {
			t.Fatalf("request %d (%s): tried %d %q %v, current alone %d %q %v: the trial changed enforcement",
				i, r.Path, got.Status, got.Rule, got.Headers, want.Status, want.Rule, want.Headers)
		}
		if got.Status != 0 {
			rejected++
		}
		if tp := got.RuleNamed("trial-premium"); tp != nil && r.Path == "/healthz" {
			if tp.Applies || !strings.HasPrefix(tp.Why, "exempted: shadow exempt rule \"trial-health\"") {
				t.Fatalf("request %d: the draft's premium rule applies to a health check (%q)", i, tp.Why)
			}
			exempted++
		}
	}
	if rejected == 0 || exempted != 20 {
		t.Errorf("%d rejected, %d health checks exempted from the draft's rule; want the enforced bucket to reject and 20 exempted", rejected, exempted)
	}
}

// simulation returns a function simulating one request after another
// against cfg at a fixed time, each seeing the states the earlier ones left.
func simulation(cfg *policy.Config) func(simulate.Request) simulate.Result {
	type key struct{ rule, identity string }
	states := map[key]simulate.State{}
	lookup := func(r *policy.Rule, id string) (simulate.State, bool) {
		s, ok := states[key{r.Name, id}]
		return s, ok
	}
	return func(r simulate.Request) simulate.Result {
		res := simulate.Run(cfg, r, simulate.Options{Now: 1e9, Lookup: lookup})
		for _, s := range res.Stores() {
			states[key{s.Rule, s.Identity}] = s.State
		}
		return res
	}
}
