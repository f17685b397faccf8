package httpapi

import (
	"context"
	"errors"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/policy"
)

// maskingPolicies is what the handlers see of the policy service: every
// version it returns has its secrets (a literal telemetry.token) replaced
// by policy.SecretMask, so no page, API answer, diff, export or Istio
// manifest can show one. A save whose token is the mask gets the token of
// the version it is based on back, so editing a masked policy keeps its
// secret. The xDS push and the version index read the service directly,
// unmasked.
type maskingPolicies struct{ Policies }

func maskVersion(v policies.Version) policies.Version {
	v.JSON = policy.MaskSecrets(v.JSON)
	return v
}

func maskResult(v policies.Version, err error) (policies.Version, error) {
	return maskVersion(v), err
}

func (m maskingPolicies) Current(ctx context.Context) (policies.Version, error) {
	return maskResult(m.Policies.Current(ctx))
}

func (m maskingPolicies) Get(ctx context.Context, n int64) (policies.Version, error) {
	return maskResult(m.Policies.Get(ctx, n))
}

func (m maskingPolicies) List(ctx context.Context, before int64, limit int) (policies.Page, error) {
	pg, err := m.Policies.List(ctx, before, limit)
	for i := range pg.Versions {
		pg.Versions[i] = maskVersion(pg.Versions[i])
	}
	return pg, err
}

// Diff compares the masked forms: a changed token shows as an unchanged
// line, never as its two values.
func (m maskingPolicies) Diff(ctx context.Context, from, to int64) (policies.Diff, error) {
	d, err := m.Policies.Diff(ctx, from, to)
	if err != nil {
		return d, err
	}
	d.From, d.To = maskVersion(d.From), maskVersion(d.To)
	old := ""
	if d.From.Number > 0 {
		old = d.From.Pretty()
	}
	d.Hunks = policies.LineDiff(old, d.To.Pretty())
	return d, nil
}

func (m maskingPolicies) Save(ctx context.Context, r policies.SaveRequest) (policies.Version, error) {
	if policy.HasMaskedSecret(r.JSON) {
		var stored []byte
		base, err := m.Policies.Get(ctx, r.Base)
		var nf *policies.NotFoundError
		switch {
		case err == nil:
			stored = base.JSON
		case !errors.As(err, &nf):
			return policies.Version{}, err
		}
		restored, err := policy.RestoreSecrets(r.JSON, stored)
		if err != nil {
			var es policy.Errors
			errors.As(err, &es)
			return policies.Version{}, &policies.ValidationError{Errors: es}
		}
		r.JSON = restored
	}
	return maskResult(m.Policies.Save(ctx, r))
}

func (m maskingPolicies) Rollback(ctx context.Context, r policies.RollbackRequest) (policies.Version, error) {
	return maskResult(m.Policies.Rollback(ctx, r))
}

// A change's proposed configuration is masked as a version's is.
func maskChange(c policies.Change) policies.Change {
	c.JSON = policy.MaskSecrets(c.JSON)
	return c
}

func (m maskingPolicies) Change(ctx context.Context, id int64) (policies.Change, error) {
	c, err := m.Policies.Change(ctx, id)
	return maskChange(c), err
}

func (m maskingPolicies) Changes(ctx context.Context, state string, limit int) ([]policies.Change, error) {
	cs, err := m.Policies.Changes(ctx, state, limit)
	for i := range cs {
		cs[i] = maskChange(cs[i])
	}
	return cs, err
}

func (m maskingPolicies) Approve(ctx context.Context, r policies.ReviewRequest) (policies.Version, error) {
	return maskResult(m.Policies.Approve(ctx, r))
}

func (m maskingPolicies) Reject(ctx context.Context, r policies.ReviewRequest) (policies.Change, error) {
	c, err := m.Policies.Reject(ctx, r)
	return maskChange(c), err
}

func (m maskingPolicies) Withdraw(ctx context.Context, r policies.ReviewRequest) (policies.Change, error) {
	c, err := m.Policies.Withdraw(ctx, r)
	return maskChange(c), err
}
