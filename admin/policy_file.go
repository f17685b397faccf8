package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/admin/httpapi"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
)

// policyFileOptions make the policy follow a file (docs/admin.md "A policy
// kept in Git"): a mounted ConfigMap that Git keeps, through helm, Argo CD
// or Flux.
type policyFileOptions struct {
	Policy, Tests string
	Every         time.Duration // from EveryText, by check
	EveryText     string
}

func (o *policyFileOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.Policy, "policy-file", env("SLUICE_POLICY_FILE", ""),
		"a policy file (JSON) the policy follows: each change of it is saved and pushed, and other changes are refused (SLUICE_POLICY_FILE)")
	fs.StringVar(&o.Tests, "policy-tests-file", env("SLUICE_POLICY_TESTS_FILE", ""),
		"with -policy-file, the policy tests file that follows it (SLUICE_POLICY_TESTS_FILE)")
	fs.StringVar(&o.EveryText, "policy-file-interval", env("SLUICE_POLICY_FILE_INTERVAL", policies.DefaultFileInterval.String()),
		"how often -policy-file is read, at least 1s (SLUICE_POLICY_FILE_INTERVAL)")
}

// check refuses flags that contradict a followed file.
func (o *policyFileOptions) check(initialPolicy, initialTests string) error {
	every, err := time.ParseDuration(o.EveryText)
	if err != nil {
		return fmt.Errorf("-policy-file-interval: %q is not a duration such as 10s or 1m", o.EveryText)
	}
	o.Every = every
	switch {
	case o.Policy == "" && o.Tests != "":
		return errors.New("-policy-tests-file needs -policy-file")
	case o.Policy == "":
		return nil
	case initialPolicy != "":
		return errors.New("-initial-policy and -policy-file: give one; with -policy-file the file is the policy")
	case initialTests != "" && o.Tests != "":
		return errors.New("-initial-tests and -policy-tests-file: give one; with -policy-tests-file the file is the tests")
	case o.Every < time.Second:
		return errors.New("-policy-file-interval: at least 1s")
	}
	return nil
}

// follow makes svc follow the file, looks at it once before the admin
// serves, then keeps looking until ctx ends. Each version the file brings
// is audited (and so notified) as a save by git; the gauge
// sluice_admin_policy_file_in_sync says whether the current version is the
// file's content.
func (o *policyFileOptions) follow(ctx context.Context, svc *policies.Service, audit httpapi.AuditLog, reg prometheus.Registerer, logger *slog.Logger) error {
	if o.Policy == "" {
		return nil
	}
	saves := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_admin_policy_file_saves_total",
		Help: "Versions (what=policy) and tests revisions (what=tests) saved from the policy file."}, []string{"what"})
	inSync := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_admin_policy_file_in_sync",
		Help: "1 when the current policy version is the policy file's content, 0 when the file is unreadable, invalid or fails the tests."},
		func() float64 {
			if st, _ := svc.FileStatus(); st.Err == "" && st.Version > 0 {
				return 1
			}
			return 0
		})
	for _, c := range []prometheus.Collector{saves, inSync} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	svc.FollowFile(policies.FileSource{Policy: o.Policy, Tests: o.Tests, OnSave: func(v policies.Version, testsOnly bool) {
		e := store.AuditEntry{At: time.Now(), Actor: policies.FileAuthor, Action: httpapi.ActionSave, Version: v.Number,
			FromVersion: v.Parent, Target: o.Policy, Detail: v.Message}
		what := "policy"
		if testsOnly {
			e.Action, e.Version, e.FromVersion, e.Target, e.Detail, what = httpapi.ActionTestsSave, 0, 0, o.Tests, "from "+o.Tests, "tests"
		}
		saves.WithLabelValues(what).Inc()
		if err := audit.AppendAudit(ctx, e); err != nil {
			logger.Error("audit log: the policy file's save was not recorded", "err", err)
		}
	}})
	st := svc.LookAtFile(ctx)
	logger.Info("the policy follows a file", "file", o.Policy, "tests", o.Tests, "every", o.Every, "version", st.Version, "in_sync", st.Err == "")
	go svc.KeepFollowingFile(ctx, o.Every)
	return nil
}
