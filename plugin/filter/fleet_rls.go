package filter

// Fleet mode, the backend side of a sync: the process's view of the
// backend's health, dispatching a batch as one ShouldRateLimit call,
// reading its answer and applying each status to its pool (fleet_sync.go
// builds the batches).

import (
	"math"
	"slices"
	"strconv"

	"github.com/sluice-rl/sluice/shared/rls"
	"github.com/sluice-rl/sluice/shared/state"
)

// ---- Health ----

// refreshHealth reads the process's view of the backend (written by
// whichever VM last heard from it).
func (fs *fleetState) refreshHealth() {
	v, _, st := getSharedData(fleetHealthKey, nil)
	if st != statusOK || len(v) < 3 || v[1] != ':' {
		return
	}
	fs.healthy = v[0] == '1'
	if n, _, ok := parseInt(v[2:]); ok && n >= 0 && n <= 100000 {
		fs.reportedSize = int(n)
	}
}

func (fs *fleetState) setHealth(up bool, size int) {
	changed := up != fs.healthy || (size > 0 && size != fs.reportedSize)
	fs.healthy = up
	if size > 0 {
		fs.reportedSize = size
	}
	if !changed {
		return
	}
	b := []byte{'0', ':'}
	if up {
		b[0] = '1'
	}
	b = strconv.AppendInt(b, int64(fs.reportedSize), 10)
	_ = setSharedData(fleetHealthKey, b, 0) // advisory: last writer wins
}

// ---- The call ----

// dispatch sends batch as one ShouldRateLimit call. False: not sent
// (counted as a backend error; health goes down).
func (p *pluginContext) dispatch(batch *syncBatch) bool {
	fc, fs := p.cfg.fleet, &p.vm.fleet
	req := rls.Request{Domain: fc.src.Domain, Descriptors: make([]rls.Descriptor, len(batch.items))}
	for i, it := range batch.items {
		d := &req.Descriptors[i]
		d.Entries = []rls.Entry{{Key: "sluice_rule", Value: it.rule.name}, {Key: "sluice_id", Value: string(it.ref.id[:])}}
		switch it.op {
		case opCharge:
			d.Entries = append(d.Entries, rls.Entry{Key: "sluice_op", Value: "charge"})
		case opBlock:
			d.Entries = append(d.Entries, rls.Entry{Key: "sluice_op", Value: "block"})
		case opReturn:
			d.Entries = append(d.Entries, rls.Entry{Key: "sluice_op", Value: "return"})
			if it.rule.fleet.windowed {
				d.Entries = append(d.Entries, rls.Entry{Key: "sluice_window", Value: strconv.FormatInt(it.window, 10)})
			}
		}
		d.HasHitsAddend, d.HitsAddend = true, uint64(it.amount)
		if rate := it.rule.tb.Rate; !it.rule.fleet.windowed && rate >= 1 && rate == math.Trunc(rate) && rate <= math.MaxUint32 {
			d.Limit = &rls.Override{RequestsPerUnit: uint32(rate), Unit: rls.UnitSecond}
		}
	}
	body := rls.AppendFrame(nil, &req)
	batch.sentMS = fs.nowMS()
	headers := [][2]string{
		{":method", "POST"},
		{":path", rls.MethodPath},
		{":authority", fc.src.Authority},
		{"content-type", "application/grpc"},
		{"te", "trailers"},
		{"x-sluice-node", fs.node},
	}
	err := dispatchHTTPCall(fc.src.Cluster, headers, body, uint32(fc.src.TimeoutMS),
		func(nh, nb, nt int) { p.onRLSResponse(batch, nh, nb, nt) })
	if err != nil {
		p.backendFailed(batch, "cannot dispatch to cluster "+fc.src.Cluster+": "+err.Error())
		return false
	}
	p.calls = append(p.calls, batch)
	return true
}

// backendFailed counts a failed call once per rule it carried and marks
// the backend down.
func (p *pluginContext) backendFailed(batch *syncBatch, why string) {
	for i, it := range batch.items {
		counted := false
		for _, prev := range batch.items[:i] {
			counted = counted || prev.rule.fleet == it.rule.fleet
		}
		if !counted {
			it.rule.fleet.m.backendErrors.inc()
		}
	}
	p.vm.fleet.oweAgain(batch) // fleet_charge.go
	p.vm.fleet.setHealth(false, 0)
	p.vm.fleet.failed++
	p.vm.logLimited(logFleet, "sluice: fleet: rate limit service call failed ("+why+"); leases are spent until they expire, then on_backend_down applies")
}

// onRLSResponse is the call's proxy_on_http_call_response.
func (p *pluginContext) onRLSResponse(batch *syncBatch, nh, nb, nt int) {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("fleet on_http_call_response", r)
		}
	}()
	p.calls = slices.DeleteFunc(p.calls, func(b *syncBatch) bool { return b == batch })
	fs := &p.vm.fleet
	now := fs.nowMS()
	if p.cfg == nil || p.cfg.fleet == nil { // reconfigured without fleet mode meanwhile
		p.finishBatch(batch, now)
		return
	}
	size, err, refused := p.readRLSResponse(nh, nb, nt, len(batch.items))
	if err != "" && refused != opFetch && batch.has(refused) {
		if p.resendWithout(batch, refused, now) { // fleet_charge.go
			return // the rest of the call answers the same requests
		}
	} else if err != "" {
		p.backendFailed(batch, err)
	} else {
		if fs.failed > 0 {
			logInfo("sluice: fleet: rate limit service answering again after " + itoa(int64(fs.failed)) + " failed calls; global limits are enforced from new leases")
			fs.failed = 0
		}
		fs.setHealth(true, size)
		for i := range batch.items {
			p.applyStatus(&batch.items[i], &fs.resp.Statuses[i], now, batch.sentMS)
		}
	}
	p.finishBatch(batch, now)
}

func (p *pluginContext) finishBatch(batch *syncBatch, now int64) {
	if batch.requestPath {
		p.resolvePending(batch)
		return
	}
	if batch.owed {
		p.vm.fleet.owedCall = nil
		return
	}
	if p.vm.fleet.sync == batch {
		p.vm.fleet.sync = nil
	}
	if p.cfg != nil && p.cfg.fleet != nil {
		p.releaseLock(now)
	}
}

// readRLSResponse checks the HTTP and gRPC status and decodes the
// response into vm.fleet.resp. It returns the x-sluice-fleet-size (0 if
// absent), an error text ("" when fine), and whether the error is the
// service refusing an operation it does not know (refusedOp; opFetch when
// not).
func (p *pluginContext) readRLSResponse(nh, nb, nt, want int) (int, string, fleetOp) {
	if nh == 0 {
		return 0, "no response: the call timed out or the cluster could not reach the service (a gRPC rate limit service needs an HTTP/2 cluster)", opFetch
	}
	hs, err := httpCallResponseHeaders()
	if err != nil {
		return 0, "response headers: " + err.Error(), opFetch
	}
	status, grpcStatus, grpcMessage, size := "", "", "", 0
	for _, h := range hs {
		switch h[0] {
		case ":status":
			status = h[1]
		case "grpc-status":
			grpcStatus = h[1]
		case "grpc-message":
			grpcMessage = h[1]
		case "x-sluice-fleet-size":
			if n, err := strconv.Atoi(h[1]); err == nil && n > 0 && n <= 100000 {
				size = n
			}
		}
	}
	if nt > 0 {
		if ts, err := httpCallResponseTrailers(); err == nil {
			for _, t := range ts {
				switch t[0] {
				case "grpc-status":
					grpcStatus = t[1]
				case "grpc-message":
					grpcMessage = t[1]
				}
			}
		}
	}
	switch {
	case status != "200":
		return 0, "HTTP status " + limitText(status), opFetch
	case grpcStatus == "":
		return 0, "no grpc-status", opFetch
	case grpcStatus != "0":
		return 0, grpcStatusText(grpcStatus, grpcMessage), refusedOp(grpcStatus, grpcMessage)
	case nb > rls.MaxMessage+5:
		return 0, "response too large", opFetch
	}
	body, err := httpCallResponseBody(0, nb)
	if err != nil && nb > 0 {
		return 0, "response body: " + err.Error(), opFetch
	}
	msg, ferr := rls.Unframe(body)
	if ferr != nil {
		return 0, ferr.Error(), opFetch
	}
	fs := &p.vm.fleet
	if derr := fs.resp.Unmarshal(msg); derr != nil {
		return 0, derr.Error(), opFetch
	}
	if len(fs.resp.Statuses) != want {
		return 0, "expected " + strconv.Itoa(want) + " descriptor statuses, got " + strconv.Itoa(len(fs.resp.Statuses)), opFetch
	}
	return size, "", opFetch
}

// grpcCodes names the gRPC status codes, by number.
var grpcCodes = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// grpcStatusText describes a failed gRPC status: "gRPC UNAVAILABLE (14):
// <grpc-message>", the code's number alone if it has no name.
func grpcStatusText(code, message string) string {
	text := "gRPC status " + limitText(code)
	if n, err := strconv.Atoi(code); err == nil && n >= 0 && n < len(grpcCodes) {
		text = "gRPC " + grpcCodes[n] + " (" + code + ")"
	}
	if message != "" {
		text += ": " + limitText(message)
	}
	return text
}

func limitText(s string) string {
	if len(s) > 32 {
		return strconv.Quote(s[:32]) + "..."
	}
	return strconv.Quote(s)
}

// applyStatus applies one descriptor's answer to its pool.
func (p *pluginContext) applyStatus(it *batchItem, st *rls.Status, now, sentMS int64) {
	m := &it.rule.fleet.m
	if it.op == opReturn {
		m.returned.add(uint64(it.amount))
		return
	}
	if it.op == opCharge {
		m.charged.add(uint64(it.amount)) // never refused: the service takes it into its debt
		return
	}
	if it.op == opBlock {
		p.blockAnswered(it, st, now) // fleet_block.go
		return
	}
	e := p.vm.fleet.hot[hotKeyFleet{rule: it.rule.name, id: it.ref.id}]
	if st.Code == rls.CodeOK {
		m.granted.add(uint64(it.amount))
		if e != nil {
			e.hint = 0
		}
		until := it.rule.fleet.leaseUntil(st, now, sentMS)
		p.updatePool(it, now, func(pl *state.Pool) {
			if pl.Mode != state.PoolLease || pl.Stamp <= now || it.rule.fleet.otherWindow(pl.Stamp, until) {
				*pl = state.Pool{Mode: state.PoolLease, Spent: pl.Spent}
			}
			pl.Tokens += it.amount * micro
			pl.Stamp = until
			pl.DenyUntil = 0
		})
		return
	}
	m.denied.inc()
	if e != nil {
		e.hint = int64(st.LimitRemaining) + 1
	}
	wait := min(max(st.ResetMillis(), 10), it.rule.fleet.fc.syncMS)
	until := it.rule.fleet.leaseUntil(st, now, sentMS)
	if it.rule.fleet.windowed {
		wait = it.rule.fleet.refusedWait(now, until) // the window is spent: only its end frees room (or a sliding window's decay)
	}
	if st.LimitRemaining > 0 {
		wait = 0 // tokens remain: the next ask, sized by the hint, may succeed
	}
	if it.rule.blockSecs > 0 {
		wait = max(wait, belowEmptyMS(it.rule, st, 0)) // a block, or debt: no ask can succeed before it ends
	}
	p.updatePool(it, now, func(pl *state.Pool) {
		if pl.Mode != state.PoolLease || pl.Stamp <= now || it.rule.fleet.otherWindow(pl.Stamp, until) {
			*pl = state.Pool{Mode: state.PoolLease, Stamp: until, Spent: pl.Spent}
		}
		if it.rule.blockSecs > 0 {
			keepDenial(pl, now+wait) // fleet_block.go: a block answered first in this call stays whole
		} else {
			pl.DenyUntil = now + wait
		}
	})
}

// updatePool applies fn to the pool of it (creating it if needed) with
// CAS, and records the sync (spent since the ask is kept as demand).
func (p *pluginContext) updatePool(it *batchItem, now int64, fn func(*state.Pool)) {
	a := p.poolApp(*it)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := p.readPool(&a, float64(now)/1000); err != nil {
			return
		}
		pl := a.fl.pool
		fn(&pl)
		pl.Spent = max(0, pl.Spent-it.spentAtSend)
		pl.LastSync = now
		if a.fl.stored && a.fl.cas == 0 {
			return
		}
		if p.putPool(&a, a.fl.way, pl, a.fl.stored, a.fl.cas) == nil {
			return
		}
	}
}
