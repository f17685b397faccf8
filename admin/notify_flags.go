package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/admin/notify"
)

// notifyFlags declares the -notify-* flags; the returned function checks
// them (each error names its flag) once the flags are parsed.
func (o *options) notifyFlags(fs *flag.FlagSet) func() error {
	fs.StringVar(&o.Notify.URL, "notify-url", env("SLUICE_NOTIFY_URL", ""), "webhook that receives every change (saves, rollbacks, trials, accounts, lockouts) as JSON with a \"text\" line, e.g. a Slack incoming webhook; the HMAC secret is read from SLUICE_NOTIFY_SECRET only; empty: off (SLUICE_NOTIFY_URL)")
	actions := fs.String("notify-actions", env("SLUICE_NOTIFY_ACTIONS", ""), "comma-separated audit actions to send, a prefix ending in \".\" for a family (default: policy.,trial.,client.,rule.reset,user.,token.,settings.,auth.lockout) (SLUICE_NOTIFY_ACTIONS)")
	return func() error {
		o.Notify.Actions = splitList(*actions)
		o.Notify.Secret = os.Getenv("SLUICE_NOTIFY_SECRET")
		if o.Notify.URL == "" {
			return nil
		}
		_, err := notify.New(o.Notify) // checks the URL and actions
		return err
	}
}

// startNotify starts the webhook (nil when -notify-url is empty), its
// metrics in reg, delivering until ctx ends.
func (o *options) startNotify(ctx context.Context, logger *slog.Logger, reg prometheus.Registerer) (*notify.Webhook, error) {
	if o.Notify.URL == "" {
		return nil, nil
	}
	opts := o.Notify
	opts.Logger = logger
	hook, err := notify.New(opts)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(hook.Collector()); err != nil {
		return nil, err
	}
	go hook.Run(ctx)
	logger.Info("notifications on", "actions", opts.Actions, "signed", opts.Secret != "")
	return hook, nil
}
