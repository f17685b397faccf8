package filter

// A root context is done when a newer configuration has replaced it and
// its last stream has ended (Envoy's startShutdown: proxy_on_done, then
// proxy_on_delete). The host then deletes it and, as Envoy's Context
// destructor does, cancels the calls it made: no answer will come for
// them. Left alone, that would leave the VM waiting for answers forever: a
// request under the new configuration that joined one of its lease asks
// would stay paused, and every later request of that key would join the
// same dead ask; its sync would hold the sync lock until it expired; its
// telemetry report would keep the VM from reporting for ten intervals.

// OnPluginDone is proxy_on_done: it settles this root context's calls as
// calls that failed. An ask's waiting requests, under any configuration,
// are decided as for any call without an answer (on_backend_down), and its
// keys ask anew later; a sync ends and frees the lock; a report counts as
// dropped.
func (p *pluginContext) OnPluginDone() (done bool) {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_done", r)
			done = true // nothing is left to wait for
		}
	}()
	const why = "the call was cancelled: the configuration that sent it was replaced"
	for len(p.calls) > 0 {
		b := p.calls[0]
		p.calls = p.calls[1:]
		if b.requestPath {
			p.backendFailed(b, why)
		}
		p.finishBatch(b, p.vm.fleet.nowMS())
	}
	if ts := &p.vm.tel; ts.inflight && ts.inflightBy == p {
		ts.inflight, ts.inflightBy = false, nil
		p.reportDropped()
	}
	return true
}
