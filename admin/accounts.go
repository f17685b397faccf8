package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/store"
)

// DefaultAuditRetention is how long audit entries are kept by default.
const DefaultAuditRetention = 365 * 24 * time.Hour

// accountFlags declares -audit-retention and -trusted-proxies; the
// returned function checks them after parsing.
func (o *options) accountFlags(fs *flag.FlagSet) func() error {
	retention := fs.String("audit-retention", env("SLUICE_AUDIT_RETENTION", "365d"),
		"how long audit log entries are kept, e.g. 365d or 2160h; at least 1d (SLUICE_AUDIT_RETENTION)")
	proxies := fs.String("trusted-proxies", env("SLUICE_TRUSTED_PROXIES", ""),
		"comma-separated addresses or CIDRs of proxies in front of the admin whose X-Forwarded-For names the client (SLUICE_TRUSTED_PROXIES)")
	return func() error {
		d, err := parseRetention(*retention)
		if err != nil {
			return err
		}
		o.AuditRetention = d
		o.TrustedProxies, err = parseProxies(*proxies)
		return err
	}
}

func parseRetention(v string) (time.Duration, error) {
	if v == "" {
		return DefaultAuditRetention, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		if _, err = fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days {
			d = time.Duration(n) * 24 * time.Hour
		} else {
			err = fmt.Errorf("not a number of days")
		}
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < 24*time.Hour {
		return 0, fmt.Errorf("-audit-retention: %q is not a duration of at least a day (e.g. 365d or 2160h)", v)
	}
	return d, nil
}

func parseProxies(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("-trusted-proxies: %q is not an address or a CIDR", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// auditPruneEvery is how often old audit entries are deleted.
const auditPruneEvery = time.Hour

// pruneAudit deletes audit entries older than retention now and then every
// auditPruneEvery until ctx ends.
func pruneAudit(ctx context.Context, st *store.Store, retention time.Duration, log *slog.Logger) {
	t := time.NewTicker(auditPruneEvery)
	defer t.Stop()
	for {
		n, err := st.PruneAudit(ctx, time.Now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("pruning the audit log failed", "err", err)
		case n > 0:
			log.Info("pruned the audit log", "deleted", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
