package redisgcra

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// SetLogger sends go-redis' own messages (dial failures, pool events) to l
// at debug level instead of stderr: every failure that matters is already
// an error returned to the caller, counted and logged there. go-redis has
// one logger per process.
func SetLogger(l *slog.Logger) { redis.SetLogger(slogAdapter{l.With("component", "go-redis")}) }

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Printf(ctx context.Context, format string, v ...any) {
	a.l.DebugContext(ctx, fmt.Sprintf(format, v...))
}
