package policies

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// teams is a configuration of three teams' policies.
func teams(paymentsRPS, searchRPS string, extra string) string {
	rule := func(name, rps string) string {
		return `{"name":"` + name + `","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":` + rps + `,"burst":100}}`
	}
	return `{"mode":"enforce","policies":[
	  {"name":"payments-api","rules":[` + rule("pay", paymentsRPS) + `]},
	  {"name":"payments-batch","rules":[` + rule("batch", "5") + `]},
	  {"name":"search","rules":[` + rule("find", searchRPS) + `]}` + extra + `]}`
}

func normalized(t *testing.T, doc string) []byte {
	t.Helper()
	n, err := Validate([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return n
}

func TestCheckScopeAllowsOnlyThePoliciesItNames(t *testing.T) {
	base := teams("10", "20", "")
	payments := Scope{"payments-*"}
	for _, c := range []struct {
		name  string
		scope Scope
		after string
		want  []string // the refused changes; none: allowed
	}{
		{"its own policy changed", payments, teams("50", "20", ""), nil},
		{"nothing changed", payments, base, nil},
		{"another team's policy changed", payments, teams("10", "99", ""), []string{`policy "search" changed`}},
		{"both changed", payments, teams("50", "99", ""), []string{`policy "search" changed`}},
		{"a policy added in scope", payments, teams("10", "20", `,{"name":"payments-new","rules":[{"name":"new","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`), nil},
		{"a policy added out of scope", payments, teams("10", "20", `,{"name":"other","rules":[{"name":"new","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`), []string{`policy "other" added`}},
		{"a top-level setting", payments, strings.Replace(base, `"mode":"enforce"`, `"mode":"shadow"`, 1), []string{`top-level setting "mode" changed`, `policy "search" changed`}}, // the rules inherit the mode
		{"a setting that appears", payments, strings.Replace(base, `"mode":"enforce"`, `"mode":"enforce","reject_status":503`, 1), []string{`top-level setting "reject_status" changed`}},
		{"an exact name", Scope{"search"}, teams("10", "99", ""), nil},
		{"an exact name is not a prefix", Scope{"payments"}, teams("50", "20", ""), []string{`policy "payments-api" changed`}},
		{"no scope allows everything", nil, strings.Replace(teams("50", "99", ""), `"mode":"enforce"`, `"mode":"shadow"`, 1), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckScope(c.scope, normalized(t, base), normalized(t, c.after))
			var se *ScopeError
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a *ScopeError", err)
			}
			if len(se.Changes) != len(c.want) {
				t.Fatalf("changes %q, want %q", se.Changes, c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(se.Changes[i], w) {
					t.Errorf("change %d is %q, want it to say %q", i, se.Changes[i], w)
				}
			}
		})
	}
}

func TestCheckScopeRefusesRemovingAndRenamingAnotherTeamsPolicy(t *testing.T) {
	base := normalized(t, teams("10", "20", ""))
	withoutSearch := normalized(t, strings.Replace(teams("10", "20", ""), `,
	  {"name":"search","rules":[{"name":"find","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":20,"burst":100}}]}`, "", 1))
	err := CheckScope(Scope{"payments-*"}, base, withoutSearch)
	if err == nil || !strings.Contains(err.Error(), `policy "search" removed`) {
		t.Errorf("removing search: %v", err)
	}
	renamed := normalized(t, strings.Replace(teams("10", "20", ""), `"name":"search"`, `"name":"payments-search"`, 1))
	err = CheckScope(Scope{"payments-*"}, base, renamed)
	if err == nil || !strings.Contains(err.Error(), `policy "search" removed`) {
		t.Errorf("renaming search into the scope: %v", err)
	}
}

func TestParseScopeNormalizesAndNamesABadPattern(t *testing.T) {
	sc, err := ParseScope(" search, payments-* search\tbilling.eu ")
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.String(); got != "billing.eu,payments-*,search" {
		t.Errorf("scope %q", got)
	}
	if sc, err := ParseScope(" , "); err != nil || sc.Restricted() {
		t.Errorf("an empty scope: %v %v", sc, err)
	}
	for _, bad := range []string{"pay*ments", "a b*c", "na/me", strings.Repeat("x", 65), "**"} {
		_, err := ParseScope(bad)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "policies" {
			t.Errorf("ParseScope(%q): %v, want an error on field policies", bad, err)
		}
	}
	if !(Scope{"*"}).Allows("anything") || (Scope{"a*"}).Allows("b") || !(Scope{"a*"}).Allows("a") {
		t.Error("prefix matching")
	}
}

// TestScopedSaveAndRollbackTouchOnlyTheirPolicies: through the service, a
// scoped author saves their policy, is refused another team's, and cannot
// roll back over another team's later change.
func TestScopedSaveAndRollbackTouchOnlyTheirPolicies(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	v1, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(teams("10", "20", "")), Author: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	payments := Scope{"payments-*"}
	v3, err := s.Save(ctx, SaveRequest{Base: v1.Number, JSON: []byte(teams("50", "20", "")), Author: "pay-team", Scope: payments})
	if err != nil {
		t.Fatalf("saving its own policy: %v", err)
	}
	_, err = s.Save(ctx, SaveRequest{Base: v3.Number, JSON: []byte(teams("50", "99", "")), Author: "pay-team", Scope: payments})
	var se *ScopeError
	if !errors.As(err, &se) {
		t.Fatalf("saving another team's policy: %v, want a *ScopeError", err)
	}
	if cur, _ := s.Current(ctx); cur.Number != v3.Number {
		t.Errorf("current version %d after a refused save, want %d", cur.Number, v3.Number)
	}
	// Search's team changes search; the payments team's rollback to v1
	// restores its own policy and keeps search's change.
	v4, err := s.Save(ctx, SaveRequest{Base: v3.Number, JSON: []byte(teams("50", "30", "")), Author: "search-team", Scope: Scope{"search"}})
	if err != nil {
		t.Fatal(err)
	}
	v5, err := s.Rollback(ctx, RollbackRequest{To: v1.Number, Base: v4.Number, Author: "pay-team", Scope: payments})
	if err != nil {
		t.Fatalf("a scoped rollback: %v", err)
	}
	if want := normalized(t, teams("10", "30", "")); string(v5.JSON) != string(want) {
		t.Errorf("after the scoped rollback:\n%s\nwant payments as in v1 and search as in v4:\n%s", v5.JSON, want)
	}
	if v5.RollbackOf != 0 || v5.Message != fmt.Sprintf("rollback of policies payments-* to v%d", v1.Number) {
		t.Errorf("the scoped rollback is recorded as %q, rollback of %d; it is not a copy of v1", v5.Message, v5.RollbackOf)
	}
	if _, err := s.Rollback(ctx, RollbackRequest{To: v1.Number, Base: v5.Number, Author: "platform"}); err != nil {
		t.Errorf("an unscoped rollback: %v", err)
	}
}

func TestRestoreInScopeBringsBackRemovedAndRemovesAddedPolicies(t *testing.T) {
	extra := func(name string) string {
		return `,{"name":"` + name + `","rules":[{"name":"r-` + name + `","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`
	}
	old := normalized(t, teams("10", "20", extra("payments-gone")))
	current := normalized(t, teams("50", "30", extra("payments-new")+extra("other")))
	merged, err := RestoreInScope(Scope{"payments-*"}, current, old)
	if err != nil {
		t.Fatal(err)
	}
	got := normalized(t, string(merged))
	want := normalized(t, teams("10", "30", extra("other")+extra("payments-gone")))
	if string(got) != string(want) {
		t.Errorf("restored:\n%s\nwant:\n%s", got, want)
	}
}

// FuzzParseScope: any text is a scope that writes itself back the same way
// and matches names without panicking, or is refused naming the field.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"", "payments-*", "a, b c", "*", "pay*ments", " , ,", "x\x00y", strings.Repeat("a,", 70)} {
		f.Add(s, "payments-api")
	}
	f.Fuzz(func(t *testing.T, text, name string) {
		sc, err := ParseScope(text)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != "policies" {
				t.Fatalf("ParseScope(%q): %v, want an error on field policies", text, err)
			}
			return
		}
		again, err := ParseScope(sc.String())
		if err != nil || again.String() != sc.String() {
			t.Fatalf("%q parsed to %q, which parses to %q, %v", text, sc.String(), again.String(), err)
		}
		if sc.Allows(name) != again.Allows(name) {
			t.Fatalf("%q and its text disagree on %q", text, name)
		}
		if !sc.Restricted() && !sc.Allows(name) {
			t.Fatalf("an empty scope refused %q", name)
		}
	})
}

// largeConfiguration is 200 policies of 5 rules each (about 250 KB
// normalized); changed is the rate of one rule of policy team-7.
func largeConfiguration(b *testing.B, changed string) []byte {
	var sb strings.Builder
	sb.WriteString(`{"policies":[`)
	for p := range 200 {
		if p > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"name":"team-%d","rules":[`, p)
		for r := range 5 {
			if r > 0 {
				sb.WriteString(",")
			}
			rps := "10"
			if p == 7 && r == 0 {
				rps = changed
			}
			fmt.Fprintf(&sb, `{"name":"t%d-r%d","limit_keys":["header:x-api-key"],"match":{"path":"/v%d"},"algorithm":"token_bucket","algorithm_config":{"rps":%s,"burst":100}}`, p, r, r, rps)
		}
		sb.WriteString("]}")
	}
	sb.WriteString("]}")
	n, err := Validate([]byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkCheckScopeOfALargeConfiguration: the scope check of a save of
// a large configuration, one rule changed; against
// BenchmarkValidateALargeConfiguration, the parse every save runs anyway.
func BenchmarkCheckScopeOfALargeConfiguration(b *testing.B) {
	before, after := largeConfiguration(b, "10"), largeConfiguration(b, "20")
	sc := Scope{"team-7"}
	b.SetBytes(int64(len(after)))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckScope(sc, before, after); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateALargeConfiguration(b *testing.B) {
	doc := largeConfiguration(b, "20")
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Validate(doc); err != nil {
			b.Fatal(err)
		}
	}
}
