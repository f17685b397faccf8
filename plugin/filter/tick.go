package filter

// on_tick has four clients: telemetry reports (every telemetry.interval_ms,
// telemetry.go), fleet syncs (every fleet.sync_interval_ms, fleet_sync.go),
// resets of every identity of a rule (every walkTickMS while one is in
// progress, resets_all.go) and held requests (a fast holdTickMS tick while
// any is held, delay.go).
// Envoy gives a root context a single timer, so its period is the shortest
// any client needs right now, and each periodic client keeps its own
// schedule in monotonic time. Setting the period re-arms Envoy's timer, so
// it is set only when it changes: re-arming on every held request would
// keep pushing the next tick back.

// tickSchedule is a root context's tick state.
type tickSchedule struct {
	period     uint32 // ms, as last set (0: off)
	nextReport int64  // monotonic ns: telemetry's next report
	nextSync   int64  // monotonic ns: fleet mode's next sync
}

// OnTick is proxy_on_tick: the fleet sync and the telemetry report when
// due, then the held streams whose time has come, then the period.
func (p *pluginContext) OnTick() {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_tick", r)
		}
	}()
	if cfg := p.cfg; cfg != nil {
		now := monoNanos()
		if cfg.fleet != nil && p.tk.due(&p.tk.nextSync, int64(cfg.fleet.syncMS), now) {
			p.guarded("on_tick (fleet sync)", p.fleetTick)
		}
		if cfg.telemetry != nil && p.tk.due(&p.tk.nextReport, int64(cfg.telemetry.IntervalMS), now) {
			p.report()
		}
	}
	if len(p.vm.walks) > 0 {
		p.guarded("on_tick (resets)", p.walkResets) // resets_all.go
	}
	p.resumeDue()
	p.settleTick()
}

// guarded runs one tick client, recovering from a panic so that the
// others (held streams above all) still get their turn.
func (p *pluginContext) guarded(where string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered(where, r)
		}
	}()
	f()
}

// due reports whether a client with period intervalMS is due at now and, if
// so, schedules its next turn. Half a tick of slack keeps a client whose
// interval equals the tick period on every tick despite timer jitter; its
// schedule restarts from now, so a late tick never causes a burst of turns.
func (t *tickSchedule) due(next *int64, intervalMS, now int64) bool {
	if now+int64(t.period)*1e6/2 < *next {
		return false
	}
	*next = now + intervalMS*1e6
	return true
}

// basePeriodMS is the period the configuration's periodic clients need:
// the shorter of the telemetry and fleet intervals, 0 (off) for none.
func (p *pluginContext) basePeriodMS() uint32 {
	var ms uint32
	if p.cfg == nil {
		return 0
	}
	if t := p.cfg.telemetry; t != nil {
		ms = uint32(t.IntervalMS)
	}
	if f := p.cfg.fleet; f != nil && (ms == 0 || uint32(f.syncMS) < ms) {
		ms = uint32(f.syncMS)
	}
	return ms
}

// settleTick sets the period this root context needs now: fast while
// streams are held, else the base period.
func (p *pluginContext) settleTick() {
	want := p.basePeriodMS()
	if len(p.vm.walks) > 0 && (want == 0 || want > walkTickMS) {
		want = walkTickMS
	}
	if len(p.hq.q) > 0 {
		want = holdTickMS
	}
	if err := p.setTickPeriod(want); err != nil {
		p.vm.logLimited(logTelemetry, "sluice: cannot set the tick period: "+err.Error())
	}
}

// setTickPeriod sets the period if it differs from the current one.
func (p *pluginContext) setTickPeriod(ms uint32) error {
	if ms == p.tk.period {
		return nil
	}
	if err := setTickPeriod(ms); err != nil {
		return err
	}
	p.tk.period = ms
	return nil
}
