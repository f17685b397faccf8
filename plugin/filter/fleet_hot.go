package filter

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/sluice-rl/sluice/shared/state"
)

// Fleet mode: the process's hot keys. Each VM knows the pools it spent
// from (fleetState.hot); the VM that holds the sync lock must refill every
// VM's, so on each tick every VM publishes its most recently used keys in
// shared data, and the lock holder merges them:
//
//	fl:vms          "{vm}:{last_tick_ms};{vm}:{last_tick_ms};..."  (CAS; VMs silent for 10 intervals drop out)
//	fl:hot:{vm}     one line per key: "{rule}\x00{sluice_id}\x00{fp hex}\x00{last_seen_ms}\x00{hint}\n"
//
// A VM publishes at most maxPublished keys (the most recently used); a key
// beyond that is still refilled by its own request-path asks.

const (
	fleetVMsKey    = "fl:vms"
	fleetHotPrefix = "fl:hot:"
	maxPublished   = 256
	maxFleetVMs    = 256
)

// publishHot writes this VM's hot keys and registers the VM.
func (p *pluginContext) publishHot(now int64) {
	fs := &p.vm.fleet
	entries := make([]*hotPool, 0, len(fs.hot))
	for _, e := range fs.hot {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(x, y *hotPool) int {
		switch {
		case x.lastSeenMS > y.lastSeenMS:
			return -1
		case x.lastSeenMS < y.lastSeenMS:
			return 1
		}
		return compareRefs(x.ref, y.ref)
	})
	b := fs.pubBuf[:0]
	for _, e := range entries[:min(len(entries), maxPublished)] {
		b = append(b, e.ref.rule...)
		b = append(b, 0)
		b = append(b, e.ref.id[:]...)
		b = append(b, 0)
		b = state.AppendHex16(b, e.ref.fp)
		b = append(b, 0)
		b = strconv.AppendInt(b, e.lastSeenMS, 10)
		b = append(b, 0)
		b = strconv.AppendInt(b, e.hint, 10)
		b = append(b, '\n')
	}
	fs.pubBuf = b
	_ = setSharedData(fleetHotPrefix+fs.vmID, b, 0) // this VM's own key
	p.registerVM(now)
}

// registerVM records this VM's tick in fl:vms (CAS), dropping VMs silent
// for ten sync intervals.
func (p *pluginContext) registerVM(now int64) {
	fs := &p.vm.fleet
	stale := now - 10*p.cfg.fleet.syncMS
	for attempt := 0; attempt < 4; attempt++ {
		v, cas, st := getSharedData(fleetVMsKey, nil)
		if st != statusOK && st != statusNotFound {
			return
		}
		b := strconv.AppendInt(append(append([]byte(nil), fs.vmID...), ':'), now, 10)
		n := 1
		for _, ent := range bytes.Split(v, []byte{';'}) {
			id, ts, ok := bytes.Cut(ent, []byte{':'})
			t, _, tok := parseInt(ts)
			if !ok || !tok || string(id) == fs.vmID || t < stale || n >= maxFleetVMs {
				continue
			}
			b = append(append(b, ';'), ent...)
			n++
		}
		if writeKey(fleetVMsKey, b, st == statusOK, cas) == nil {
			return
		}
	}
}

// mergedHot is the process's hot keys: this VM's table plus every live
// VM's published list, the latest use of each key.
func (p *pluginContext) mergedHot(now int64) map[hotKeyFleet]*hotPool {
	fs := &p.vm.fleet
	out := make(map[hotKeyFleet]*hotPool, len(fs.hot))
	for k, e := range fs.hot {
		c := *e
		out[k] = &c
	}
	v, _, st := getSharedData(fleetVMsKey, nil)
	if st != statusOK {
		return out
	}
	stale := now - 10*p.cfg.fleet.syncMS
	for _, ent := range bytes.Split(v, []byte{';'}) {
		id, ts, ok := bytes.Cut(ent, []byte{':'})
		t, _, tok := parseInt(ts)
		if !ok || !tok || string(id) == fs.vmID || t < stale {
			continue
		}
		list, _, st := getSharedData(fleetHotPrefix+string(id), nil)
		if st == statusOK {
			mergeHotList(out, list, p.cfg)
		}
	}
	return out
}

// mergeHotList adds a published list to m; malformed lines and unknown
// rules are skipped.
func mergeHotList(m map[hotKeyFleet]*hotPool, list []byte, cfg *compiledConfig) {
	for len(list) > 0 {
		line, rest, _ := bytes.Cut(list, []byte{'\n'})
		list = rest
		f := bytes.Split(line, []byte{0})
		if len(f) != 5 || len(f[1]) != idLen || len(f[2]) != 16 {
			continue
		}
		r := cfg.byName[string(f[0])]
		fp, err := strconv.ParseUint(string(f[2]), 16, 64)
		seen, _, ok1 := parseInt(f[3])
		hint, _, ok2 := parseInt(f[4])
		if r == nil || r.fleet == nil || err != nil || !ok1 || !ok2 {
			continue
		}
		var k hotKeyFleet
		k.rule = r.name
		copy(k.id[:], f[1])
		if e := m[k]; e != nil {
			e.lastSeenMS = max(e.lastSeenMS, seen)
			continue
		}
		m[k] = &hotPool{ref: poolRef{rule: r.name, id: k.id, fp: fp}, lastSeenMS: seen, hint: hint, live: true}
	}
}

// pruneHot drops from this VM's table the keys unused for a lease TTL.
func (fs *fleetState) pruneHot(now, ttlMS int64) {
	for k, e := range fs.hot {
		if now-e.lastSeenMS > ttlMS {
			e.live = false
			delete(fs.hot, k)
		}
	}
}
