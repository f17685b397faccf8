package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// Backend runs bucket and window counter operations: redisgcra.Buckets
// (Redis) or pggcra.Buckets (PostgreSQL), the same GCRA on the backend's
// clock and the same counters (docs/design/fleet-windows.md). Run
// applies a call's ops in redisgcra.Order, in one round trip, and returns
// their outcomes in the call's order; on an error none (the ops may or
// may not have been applied).
// An Op's Key names the bucket (redisgcra.Key).
type Backend interface {
	Run(ctx context.Context, ops []redisgcra.Op) ([]redisgcra.Outcome, error)
	Ping(ctx context.Context) error
}

// DefaultTimeout is the backend budget of one ShouldRateLimit call.
const DefaultTimeout = 100 * time.Millisecond

// Options configure a Server.
type Options struct {
	Backend Backend
	Rules   Rules
	Metrics *Metrics // nil: a private set
	// Timeout is the backend budget of one call (default DefaultTimeout):
	// past it the call answers UNAVAILABLE, and the plugin falls back.
	Timeout time.Duration
	Logger  *slog.Logger
	Now     func() time.Time // default time.Now
	// BackendName describes the backend for the dashboard ("redis
	// 10.0.0.7:6379"); never a password.
	BackendName string
	// GRPCOptions are added to the gRPC server's (TLS credentials, say).
	GRPCOptions []grpc.ServerOption
}

// Server is the rate limit service. It keeps no limit state of its own:
// every bucket is in the backend, so replicas behind a load balancer agree.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	backend Backend
	rules   Rules
	metrics *Metrics
	timeout time.Duration
	log     *slog.Logger
	now     func() time.Time
	fleet   *tracker

	backendName string
	grpcOptions []grpc.ServerOption

	healthMu sync.Mutex
	health   Health
	outage   backendOutage
}

// backendOutage is what the log needs of a run of backend failures: the first
// failure is a WARN line, the next ones are summed up in at most one line
// per FailureLogInterval, and the first success after them is an INFO
// line. A Redis outage under load is thousands of failed calls a second.
type backendOutage struct {
	since    time.Time // first failure of the run; zero while the backend answers
	failures int       // failed calls (and health checks) in the run
	lastLog  time.Time
	unlogged int // failures since lastLog
}

// FailureLogInterval is the shortest time between two log lines about one
// backend outage.
const FailureLogInterval = 10 * time.Second

// Health is the backend's health as this admin sees it.
type Health struct {
	Up        bool          // the last batch or check succeeded
	Checked   time.Time     // of the last batch or check; zero before the first
	LastOK    time.Time     // last success
	LastError string        // last failure's message
	ErrorAt   time.Time     // and when
	Errors    uint64        // failures since start
	Latency   time.Duration // of the last success
}

// NewServer returns the service; serve it with Serve or register it on a
// grpc.Server of your own with Register.
func NewServer(o Options) *Server {
	s := &Server{backend: o.Backend, rules: o.Rules, metrics: o.Metrics, timeout: o.Timeout,
		log: o.Logger, now: o.Now, fleet: newTracker(), backendName: o.BackendName, grpcOptions: o.GRPCOptions}
	if s.metrics == nil {
		s.metrics = NewMetrics()
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Register adds the service to g.
func (s *Server) Register(g grpc.ServiceRegistrar) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// Serve answers gRPC on lis until ctx ends: HTTP/2 over cleartext TCP
// (prior knowledge, what Envoy's gRPC clients and the plugin speak), or
// TLS when Options.GRPCOptions carry its credentials, and
// checks Redis every healthEvery meanwhile. It stops gracefully.
func (s *Server) Serve(ctx context.Context, lis net.Listener, healthEvery time.Duration) error {
	g := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(1 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, s.grpcOptions...)...)
	s.Register(g)
	go s.checkHealth(ctx, healthEvery)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			g.Stop()
		}
	}()
	err := g.Serve(lis)
	if ctx.Err() != nil {
		<-done
		return nil
	}
	return err
}

func (s *Server) checkHealth(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		start := s.now()
		err := s.backend.Ping(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.noteBackend(start, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ShouldRateLimit implements the rate limit service (docs/fleet.md).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	items, err := s.parse(req)
	if err != nil {
		return nil, s.invalid(err)
	}
	now := s.now()
	plan, err := s.plan(req.Domain, items, now)
	if err != nil {
		return nil, s.invalid(err)
	}
	node := nodeOf(ctx)
	size := s.fleet.seen(req.Domain, node, now)
	// The header goes out with the answer or the error: a plugin learns
	// the fleet size even while Redis is down.
	_ = grpc.SetHeader(ctx, metadata.Pairs(FleetHeader, strconv.Itoa(size)))

	// A caller giving up (its timeout) must not abort the backend call
	// half way: its ops would then have an unknown effect, and tokens taken
	// by a script that ran would be granted to nobody. The call runs to its
	// end within the admin's own budget instead, and what it granted is
	// given back below.
	outs, err := s.run(context.WithoutCancel(ctx), plan.ops)
	if err != nil {
		s.metrics.requests.WithLabelValues(RequestUnavailable).Inc()
		return nil, status.Error(codes.Unavailable, "sluice fleet backend: "+err.Error())
	}
	if ctx.Err() != nil {
		// The caller is gone: it counts the call as failed and never
		// spends the grant (Envoy drops a late answer), so the tokens go
		// back to their buckets instead of being lost until they refill.
		s.giveBack(ctx, items, plan, outs)
		s.metrics.requests.WithLabelValues(RequestAbandoned).Inc()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	resp := s.answer(req.Domain, node, now, items, plan, outs)
	result := RequestOK
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		result = RequestOverLimit
	}
	s.metrics.requests.WithLabelValues(result).Inc()
	return resp, nil
}

// invalid counts a request refused with INVALID_ARGUMENT and returns its
// error.
func (s *Server) invalid(err error) error {
	s.metrics.requests.WithLabelValues(RequestInvalid).Inc()
	return status.Error(codes.InvalidArgument, err.Error())
}

func (s *Server) parse(req *rlsv3.RateLimitRequest) ([]item, error) {
	switch {
	case req == nil:
		return nil, errors.New("empty request")
	case req.Domain == "":
		return nil, errors.New("domain: empty")
	case len(req.Domain) > MaxDomainLen:
		return nil, fmt.Errorf("domain: %d bytes, over the limit of %d", len(req.Domain), MaxDomainLen)
	case len(req.Descriptors) == 0:
		return nil, errors.New("descriptors: empty")
	case len(req.Descriptors) > MaxDescriptors:
		return nil, fmt.Errorf("descriptors: %d, over the limit of %d per call", len(req.Descriptors), MaxDescriptors)
	}
	items := make([]item, len(req.Descriptors))
	for i, d := range req.Descriptors {
		it, err := parseDescriptor(i, d, req.HitsAddend)
		if err != nil {
			return nil, err
		}
		items[i] = it
	}
	return items, nil
}

func nodeOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(NodeHeader)
	if len(v) == 0 || len(v[0]) > MaxNodeLen {
		return ""
	}
	return v[0]
}

// plan decides each descriptor's limit and the backend op it needs.
type plan struct {
	limits []limitOf
	opOf   []int // index into ops, or -1 when no Redis call is needed
	ops    []redisgcra.Op
}

type limitOf struct {
	limit  redisgcra.Limit
	kind   limitKind
	global bool // from the policy (else a descriptor's override)
	unit   typev3.RateLimitUnit
	per    uint32 // override's requests_per_unit and unit, echoed in current_limit
	mult   uint32
	// A counted (window) limit: the window and the bounds of the one
	// the op counts in (the current one, or the one a return names).
	win        Window
	start, end time.Time
}

type limitKind int

const (
	unlimited limitKind = iota // no rule, no override: OK without a limit
	limited                    // a bucket in Redis
	denyAll                    // override with requests_per_unit 0
	counted                    // a global fixed window or quota: a counter in the backend
)

// plan decides each descriptor's limit and the backend op it needs. The
// error is a descriptor the limit makes invalid: a charge of a sliding or
// rolling window (nothing is run for any descriptor then).
func (s *Server) plan(domain string, items []item, now time.Time) (plan, error) {
	p := plan{limits: make([]limitOf, len(items)), opOf: make([]int, len(items))}
	for i, it := range items {
		l := s.limitFor(it, now)
		p.limits[i], p.opOf[i] = l, -1
		if it.block && !l.blocks() {
			// Nothing to block (a rule that is no longer, or never was,
			// a global token bucket with block_seconds: the policy may
			// have changed while the op travelled): answered as a query.
			it.block, it.hits = false, 0
		}
		switch {
		case l.kind == counted && it.charge && !l.win.chargeable():
			return plan{}, chargeOfWindow(i, it)
		case l.kind == counted:
			p.limits[i].start, p.limits[i].end = l.win.Bounds(now)
			p.opOf[i] = len(p.ops)
			p.ops = append(p.ops, counterOp(domain, it, p.limits[i], now))
		case l.kind == limited:
			p.opOf[i] = len(p.ops)
			p.ops = append(p.ops, bucketOp(domain, it, l.limit))
		}
	}
	return p, nil
}

// blocks reports whether a block op of a descriptor of limit l blocks:
// l is a global token bucket of the policy with block_seconds.
func (l limitOf) blocks() bool {
	return l.kind == limited && l.global && l.limit.Block() > 0
}

// chargeOfWindow is the error of descriptors[i], a charge of a global
// sliding or rolling window: those weigh leases across windows or
// sub-periods, which a charge after the fact cannot join, so the plugin
// never sends one (their costs are the request's).
func chargeOfWindow(i int, it item) error {
	return fmt.Errorf("descriptors[%d].entries[%d]: %s %q for rule %q, a global sliding or rolling window: charges apply to token_bucket, quota and fixed_window rules only",
		i, it.opEntry, KeyOp, OpCharge, clip(it.rule))
}

// bucketOp is the op of a descriptor of a bucket of limit l: a take of its
// tokens' cost, a return of their credit, a charge of their cost capped
// at the bucket's burst plus its debt, or a block for a request costing
// their cost.
func bucketOp(domain string, it item, l redisgcra.Limit) redisgcra.Op {
	op := redisgcra.Op{Key: redisgcra.Key(domain, it.rule, it.id), Tau: l.Tau()}
	switch {
	case it.block:
		op.Block, op.Amount = l.Block(), l.Cost(it.hits)
	case it.ret:
		op.Return, op.Amount = true, l.Credit(it.hits)
	case it.charge:
		op.Charge, op.Amount, op.Tau = true, l.Cost(it.hits), l.ChargeCap()
	default:
		op.Amount = l.Cost(it.hits)
	}
	return op
}

// counterOp is the Redis op of a descriptor of a counted limit, l's
// bounds the current (sub-)window's. A return goes to the (sub-)window it
// was leased in when it names one: a past window's counter has expired or
// left the sum (the return does nothing), so it never frees room in a
// later window. A charge (a fixed window's or quota's only) counts in the
// current window, unconditionally, up to the limit plus the debt allowed.
func counterOp(domain string, it item, l limitOf, now time.Time) redisgcra.Op {
	start := l.start
	if it.ret && it.hasWindow {
		start = time.UnixMilli(it.window)
	}
	w := l.win
	op := redisgcra.Op{Counter: true, Amount: int64(min(it.hits, math.MaxInt32)), Limit: w.Limit, Return: it.ret,
		ExpireAtMS: w.keyEnd(l.end).UnixMilli()}
	if it.charge {
		op.Charge, op.Limit = true, w.chargeCap()
	}
	switch {
	case w.rolling():
		period := time.Duration(w.Seconds) * time.Second
		op.Key, op.Rolling, op.MaxPerPeriod = redisgcra.RollingKey(domain, it.rule, it.id), true, w.MaxPerPeriod
		op.FieldMS, op.OldestMS = start.UnixMilli(), l.start.Add(-time.Duration(w.Periods-1)*period).UnixMilli()
		return op
	case w.Sliding && !it.ret:
		length := time.Duration(w.Seconds) * time.Second
		op.PrevKey = redisgcra.WindowKey(domain, it.rule, it.id, start.Add(-length).UnixMilli())
		op.NowMS, op.LengthMS = now.UnixMilli(), length.Milliseconds()
	}
	op.Key, op.StartMS = redisgcra.WindowKey(domain, it.rule, it.id, start.UnixMilli()), start.UnixMilli()
	return op
}

func (s *Server) limitFor(it item, now time.Time) limitOf {
	if !it.sluice {
		return limitOf{kind: unlimited}
	}
	if w, ok := s.windowFor(it, now); ok {
		return limitOf{win: w, kind: counted, global: true}
	}
	if l, ok := s.bucketFor(it, now); ok {
		return limitOf{limit: l, kind: limited, global: true}
	}
	o := it.override
	if o == nil {
		return limitOf{kind: unlimited}
	}
	lo := limitOf{kind: denyAll, unit: o.unit, per: o.perUnit, mult: o.multiple}
	if l, ok := o.limit(); ok {
		lo.limit, lo.kind = l, limited
	}
	return lo
}

// windowFor returns the global window or quota limiting the descriptor's
// identity at now: its override's, or its rule's.
func (s *Server) windowFor(it item, now time.Time) (Window, bool) {
	if ir, ok := s.rules.(IdentityRules); ok {
		return ir.IdentityWindow(it.rule, it.id, now)
	}
	if wr, ok := s.rules.(WindowRules); ok {
		return wr.GlobalWindow(it.rule)
	}
	return Window{}, false
}

// bucketFor returns the global token bucket limiting the descriptor's
// identity at now: its override's, or its rule's.
func (s *Server) bucketFor(it item, now time.Time) (redisgcra.Limit, bool) {
	if ir, ok := s.rules.(IdentityRules); ok {
		return ir.IdentityLimit(it.rule, it.id, now)
	}
	return s.rules.GlobalLimit(it.rule)
}

func (s *Server) run(ctx context.Context, ops []redisgcra.Op) ([]redisgcra.Outcome, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := s.now()
	outs, err := s.backend.Run(ctx, ops)
	s.metrics.redisTime.Observe(s.now().Sub(start).Seconds())
	s.noteBackend(start, err)
	if err != nil {
		kind := "error"
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			kind = "timeout"
		}
		s.metrics.redisErrors.WithLabelValues(kind).Inc()
		return nil, err
	}
	return outs, nil
}

// giveBack returns the tokens a call granted to a caller that gave up
// before the answer, and undoes its charges (the caller counts the call
// as failed and sends its charges again). A failure leaves them taken (an
// under-admission, as before the fix; never an over-admission), and is
// logged. Blocks stay: the caller sends them again, and a block op sent
// again finds the bucket below empty and changes nothing.
func (s *Server) giveBack(ctx context.Context, items []item, p plan, outs []redisgcra.Outcome) {
	var ops []redisgcra.Op
	for i, it := range items {
		j := p.opOf[i]
		if j < 0 || it.ret || it.block || !outs[j].Allowed || it.hits == 0 {
			continue // a block is never undone: the identity was refused
		}
		if op, ok := undoOp(p.ops[j], outs[j], p.limits[i].limit, it.hits); ok {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return
	}
	if _, err := s.run(context.WithoutCancel(ctx), ops); err != nil {
		s.log.Warn("fleet: cannot give back the grant of a caller that gave up", "ops", len(ops), "err", err)
	}
}

// undoOp is the op that gives back what op did for hits tokens: a
// window's count; a take's tokens, by their credit; exactly what a charge
// added (to a window's count, or the time to the TAT), less than its cost
// when the cap clamped it: giving back the whole cost would free room
// that was never charged.
func undoOp(op redisgcra.Op, out redisgcra.Outcome, l redisgcra.Limit, hits uint64) (redisgcra.Op, bool) {
	switch {
	case op.Counter && op.Charge:
		op.Charge, op.Return, op.Amount = false, true, out.Charged
		return op, out.Charged > 0
	case op.Counter:
		op.Return = true
		return op, true
	case op.Charge:
		return redisgcra.Op{Key: op.Key, Tau: op.Tau, Return: true, Amount: out.Charged}, out.Charged > 0
	}
	return redisgcra.Op{Key: op.Key, Tau: op.Tau, Return: true, Amount: l.Credit(hits)}, true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *Server) noteBackend(start time.Time, err error) {
	now := s.now()
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	h := &s.health
	h.Checked, h.Up = now, err == nil
	if err == nil {
		h.LastOK, h.Latency = now, now.Sub(start)
		s.noteRecovery(now)
		return
	}
	h.LastError, h.ErrorAt = err.Error(), now
	h.Errors++
	s.noteFailure(now, err)
}

// noteFailure logs a backend failure, rate-limited (see backendOutage). The
// caller holds healthMu.
func (s *Server) noteFailure(now time.Time, err error) {
	o := &s.outage
	o.failures++
	if o.since.IsZero() {
		o.since, o.lastLog, o.unlogged = now, now, 0
		s.log.Warn("fleet backend failed; the rate limit service answers UNAVAILABLE and the plugins apply on_backend_down until it answers again",
			"backend", s.backendName, "err", err)
		return
	}
	o.unlogged++
	if now.Sub(o.lastLog) < FailureLogInterval {
		return
	}
	s.log.Warn("fleet backend still failing", "backend", s.backendName, "down_for", now.Sub(o.since).Round(time.Second).String(),
		"failures_since_last_line", o.unlogged, "err", err)
	o.lastLog, o.unlogged = now, 0
}

// noteRecovery logs the end of an outage. The caller holds healthMu.
func (s *Server) noteRecovery(now time.Time) {
	o := &s.outage
	if o.since.IsZero() {
		return
	}
	s.log.Info("fleet backend recovered", "backend", s.backendName, "down_for", now.Sub(o.since).Round(time.Millisecond).String(),
		"failures", o.failures)
	*o = backendOutage{}
}

// Health returns the backend's health.
func (s *Server) Health() Health {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	return s.health
}

// Usage returns the recent use of every global rule by node, as this
// replica saw it.
func (s *Server) Usage() []RuleUsage { return s.fleet.snapshot(s.now()) }

func (s *Server) answer(domain, node string, now time.Time, items []item, p plan, outs []redisgcra.Outcome) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items))}
	for i, it := range items {
		l := p.limits[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		result := DescriptorOK
		switch l.kind {
		case unlimited:
			result = DescriptorUnlimited
		case denyAll:
			st.CurrentLimit = overrideLimit(it.rule, l)
			if !it.ret && !it.block && it.hits > 0 {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		case counted:
			o := outs[p.opOf[i]]
			st.CurrentLimit = windowLimit(it.rule, l.win)
			st.LimitRemaining = uint32(min(max(l.win.Limit-o.Count, 0), math.MaxUint32))
			st.DurationUntilReset = durationpb.New(max(l.end.Sub(now), 0))
			if !o.Allowed {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if charged := uint64(max(o.Charged, 0)); it.charge && charged < it.hits {
				// Requests beyond the limit plus the debt allowed: dropped.
				s.countClamped(it, l, float64(it.hits-charged))
			}
		case limited:
			o := outs[p.opOf[i]]
			if l.global {
				st.CurrentLimit = currentLimit(it.rule, l.limit)
			} else {
				st.CurrentLimit = overrideLimit(it.rule, l)
			}
			st.LimitRemaining = uint32(min(l.limit.Remaining(o.Backlog), math.MaxUint32))
			st.DurationUntilReset = durationpb.New(redisgcra.Micros(o.Backlog))
			if !o.Allowed {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if op := p.ops[p.opOf[i]]; op.Charge && o.Charged < op.Amount {
				s.countClamped(it, l, float64(op.Amount-o.Charged)*l.limit.Rate/1e6)
			}
		}
		switch {
		case it.ret:
			result = DescriptorReturn
			st.Code = rlsv3.RateLimitResponse_OK // a return always succeeds
		case it.charge:
			result = DescriptorCharge
			st.Code = rlsv3.RateLimitResponse_OK // a charge is never refused
		case it.block:
			// OVER_LIMIT when, and only when, this op put the block in
			// place (the op's outcome refused).
			result = DescriptorBlock
			if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			result = DescriptorOverLimit
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		s.count(domain, node, now, it, l, st.Code)
		s.metrics.descriptors.WithLabelValues(result).Inc()
		resp.Statuses[i] = st
	}
	return resp
}

func (s *Server) count(domain, node string, now time.Time, it item, l limitOf, code rlsv3.RateLimitResponse_Code) {
	if l.kind == unlimited {
		return
	}
	var c tokenCounts
	decision := "granted"
	if it.block {
		// No tokens: a block op counts the blocks it put in place (only
		// ever of a global rule's bucket).
		if code == rlsv3.RateLimitResponse_OVER_LIMIT {
			c.blocked = 1
			s.metrics.blocks.WithLabelValues(ruleLabel(it, l)).Inc()
		}
		if l.global {
			s.fleet.record(usageKey{domain, it.rule, node}, now, c)
		}
		return
	}
	switch {
	case it.ret:
		c.returned, decision = it.hits, "returned"
	case it.charge:
		// Not a grant: tokens spent already, taken into the bucket's
		// debt (past a window's limit), counted apart from leases.
		c.charged, decision = it.hits, "charged"
	case code == rlsv3.RateLimitResponse_OK:
		c.granted = it.hits
	default:
		c.denied, decision = it.hits, "denied"
	}
	if l.global {
		s.fleet.record(usageKey{domain, it.rule, node}, now, c)
	}
	s.metrics.tokens.WithLabelValues(ruleLabel(it, l), decision).Add(float64(it.hits))
}

// countClamped counts the tokens of a charge the debt's cap dropped (a
// bucket's, or a window's limit plus its debt): costs reported beyond
// max_debt, a sign that it is too small for the answers.
func (s *Server) countClamped(it item, l limitOf, tokens float64) {
	s.metrics.tokens.WithLabelValues(ruleLabel(it, l), "clamped").Add(tokens)
}

// ruleLabel is the rule label of a descriptor's tokens: its rule when the
// policy has it, else otherRule.
func ruleLabel(it item, l limitOf) string {
	if l.global {
		return it.rule
	}
	return otherRule
}

// currentLimit expresses a rate as requests_per_unit per unit: the
// shortest unit (second, minute, hour, day) in which it is at least one
// whole request, rounded to the nearest whole number.
func currentLimit(name string, l redisgcra.Limit) *rlsv3.RateLimitResponse_RateLimit {
	units := []struct {
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		sec  float64
	}{
		{rlsv3.RateLimitResponse_RateLimit_SECOND, 1},
		{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60},
		{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600},
		{rlsv3.RateLimitResponse_RateLimit_DAY, 86400},
	}
	u := units[len(units)-1]
	for _, c := range units {
		if l.Rate*c.sec >= 1 {
			u = c
			break
		}
	}
	per := math.Round(l.Rate * u.sec)
	return &rlsv3.RateLimitResponse_RateLimit{Name: name, Unit: u.unit,
		RequestsPerUnit: uint32(min(max(per, 1), math.MaxUint32))}
}

// windowLimit is a counted limit's current_limit: the limit per window
// when the window is one unit (a second, minute, hour or day), else the
// limit as a rate per the shortest unit that holds one request.
func windowLimit(name string, w Window) *rlsv3.RateLimitResponse_RateLimit {
	units := map[int64]rlsv3.RateLimitResponse_RateLimit_Unit{1: rlsv3.RateLimitResponse_RateLimit_SECOND,
		60: rlsv3.RateLimitResponse_RateLimit_MINUTE, 3600: rlsv3.RateLimitResponse_RateLimit_HOUR,
		86400: rlsv3.RateLimitResponse_RateLimit_DAY}
	seconds := w.length()
	if u, ok := units[seconds]; ok {
		return &rlsv3.RateLimitResponse_RateLimit{Name: name, Unit: u, RequestsPerUnit: uint32(min(w.Limit, math.MaxUint32))}
	}
	return currentLimit(name, redisgcra.Limit{Rate: float64(w.Limit) / float64(seconds)})
}

func overrideLimit(name string, l limitOf) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: l.per,
		Unit: rlsv3.RateLimitResponse_RateLimit_Unit(l.unit)} // the enums share their values
	if l.mult > 1 {
		cl.UnitMultiplier = wrapU32(l.mult)
	}
	return cl
}
