package helmtest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// Replicated admins stay up through node drains and spread over nodes and
// zones: a PodDisruptionBudget and a soft spread select exactly the admin's
// pods. One admin (SQLite) gets neither: a budget would block every drain.
// Constraints of one's own replace the spread; a priority class is passed on.
func TestChartKeepsReplicatedAdminsAvailable(t *testing.T) {
	const replicated = "replicas: 3\ndatabase: {url: postgres://sluice@db/sluice}\n"
	objs, _, err := render(t, replicated+"priorityClassName: platform-critical\n")
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	pods := d.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if pods[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if len(objs["PodDisruptionBudget"]) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(objs["PodDisruptionBudget"]))
	}
	pdb := decode[policyv1.PodDisruptionBudget](t, objs["PodDisruptionBudget"][0])
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil || !matches(pdb.Spec.Selector.MatchLabels) {
		t.Errorf("the budget: %+v", pdb.Spec)
	}
	spread := d.Spec.Template.Spec.TopologySpreadConstraints
	if len(spread) != 2 || spread[0].TopologyKey != "kubernetes.io/hostname" || spread[1].TopologyKey != "topology.kubernetes.io/zone" {
		t.Fatalf("the spread: %+v", spread)
	}
	for _, c := range spread {
		if c.WhenUnsatisfiable != "ScheduleAnyway" || c.MaxSkew != 1 || !matches(c.LabelSelector.MatchLabels) {
			t.Errorf("a spread constraint: %+v", c)
		}
	}
	if d.Spec.Template.Spec.PriorityClassName != "platform-critical" {
		t.Errorf("priority class %q", d.Spec.Template.Spec.PriorityClassName)
	}

	objs, _, err = render(t, replicated+"topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: x}}}]\npodDisruptionBudget: {maxUnavailable: 50%}\n")
	if err != nil {
		t.Fatal(err)
	}
	d = decode[appsv1.Deployment](t, objs["Deployment"][0])
	if spread := d.Spec.Template.Spec.TopologySpreadConstraints; len(spread) != 1 || spread[0].WhenUnsatisfiable != "DoNotSchedule" {
		t.Errorf("one's own spread: %+v", spread)
	}
	if pdb := decode[policyv1.PodDisruptionBudget](t, objs["PodDisruptionBudget"][0]); pdb.Spec.MaxUnavailable.String() != "50%" {
		t.Errorf("a percentage: %v", pdb.Spec.MaxUnavailable)
	}

	for _, vals := range []string{"", replicated + "podDisruptionBudget: {enabled: false}\n"} {
		objs, _, err := render(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(objs["PodDisruptionBudget"]); n != 0 {
			t.Errorf("%q: %d PodDisruptionBudgets", vals, n)
		}
		if vals == "" && len(decode[appsv1.Deployment](t, objs["Deployment"][0]).Spec.Template.Spec.TopologySpreadConstraints) != 0 {
			t.Error("one admin is spread")
		}
	}
	if _, _, err := render(t, replicated+"podDisruptionBudget: {maxUnavailable: 0}\n"); err == nil {
		t.Error("a budget that allows no disruption rendered")
	}
}
