package wasmhost

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
)

// configureNewRoot creates a new root context with config (Reconfigure,
// phase one). It returns the root even when on_configure rejected it, so it
// can be retired.
func (vm *VM) configureNewRoot(ctx context.Context, config []byte) (*rootContext, error) {
	if err := vm.enter(ctx); err != nil {
		return nil, err
	}
	defer vm.leave()
	vm.logStart = vm.h.logs.next()
	root := &rootContext{id: vm.newContextID(), config: config}
	vm.roots[root.id] = root
	if err := vm.callCtx(root, vm.fn.contextCreate, "proxy_on_context_create", root.id, 0); err != nil {
		return nil, err
	}
	if ok, err := vm.vmStart(root); err != nil {
		return nil, err
	} else if !ok {
		return root, vm.startErrorf(errVMStartFalse.Error())
	}
	ok, err := vm.configure(root)
	if err != nil {
		return nil, err
	}
	if !ok {
		return root, vm.startErrorf("proxy_on_configure returned false (the plugin rejected its configuration)")
	}
	return root, nil
}

func (vm *VM) startErrorf(msg string) error {
	err := vm.startError(errors.New(msg))
	return errors.New(strings.Replace(err.Error(), "failed to start", "rejected the configuration", 1))
}

// swapRoot is phase two of Reconfigure: on commit, root becomes the VM's
// root context and the old one is retired; otherwise root is retired.
func (vm *VM) swapRoot(ctx context.Context, root *rootContext, commit bool) error {
	if err := vm.enter(ctx); err != nil {
		return err
	}
	defer vm.leave()
	old := root
	if commit {
		old, vm.root = vm.root, root
	}
	return vm.retireRoot(old)
}

// retireRoot retires a root context that is no longer in force. As in
// Envoy, where in-flight streams keep the old filter configuration (and its
// root context) alive, this waits until the streams created on it have
// ended; then proxy_on_done, then proxy_on_delete if the plugin is done,
// otherwise when it calls proxy_done.
func (vm *VM) retireRoot(root *rootContext) error {
	if root.retiring || root.deleted {
		return nil
	}
	root.superseded = true
	if root.streams > 0 {
		return nil // finish() retires it after its last stream
	}
	root.retiring = true
	done := true
	if vm.fn.done != nil {
		vm.stack[0] = uint64(root.id)
		if err := vm.callRoot(root, vm.fn.done, "proxy_on_done", 1); err != nil {
			return err
		}
		done = uint32(vm.stack[0]) != 0
	}
	if !done {
		root.pendingDone = true
		return nil
	}
	return vm.deleteRoot(root)
}

func (vm *VM) deleteRoot(root *rootContext) error {
	if root.deleted {
		return nil
	}
	root.deleted = true
	root.tickPeriod = 0
	for id, c := range vm.calls {
		if c.root == root {
			delete(vm.calls, id)
			c.cancel(errCallCancelled)
		}
	}
	delete(vm.roots, root.id)
	vm.updateDue()
	if vm.fn.delete != nil {
		vm.stack[0] = uint64(root.id)
		vm.beginCallback(root, nil, root.id)
		if err := vm.call(vm.fn.delete, "proxy_on_delete", 1); err != nil {
			vm.cur = callState{}
			return err
		}
		vm.cur = callState{}
	}
	return nil
}

// Tick runs proxy_on_tick on this VM's root contexts whose period elapsed
// (see Host.Tick) and fails HTTP calls whose timeout passed.
func (vm *VM) Tick(ctx context.Context) error {
	if err := vm.enter(ctx); err != nil {
		return err
	}
	defer vm.leave()
	return vm.tickLocked()
}

// tickLocked fires what is due at the clock's time in the order it fell
// due, as an event loop fires its timers after a stall: each root
// context's tick once (no catch-up) and each timed-out HTTP call, a timeout
// before a tick due at the same instant. Envoy's host library, under the
// envoyhost test program, orders them the same way.
func (vm *VM) tickLocked() error {
	now := vm.h.clocks.nanotime()
	for _, ev := range vm.dueEvents(now) {
		var err error
		if ev.call != nil {
			err = vm.expireCall(ev.call)
		} else {
			err = vm.tickRoot(ev.root, now)
		}
		if err != nil {
			return err
		}
	}
	vm.updateDue()
	return nil
}

// dueEvent is a timed-out call or a root context's due tick.
type dueEvent struct {
	at   int64
	call *HTTPCall
	root *rootContext
}

// dueEvents lists what is due at now, earliest first.
func (vm *VM) dueEvents(now int64) []dueEvent {
	var evs []dueEvent
	for _, c := range vm.calls {
		if c.deadline != 0 && c.deadline <= now {
			evs = append(evs, dueEvent{at: c.deadline, call: c})
		}
	}
	if vm.fn.tick != nil {
		for _, r := range vm.roots {
			if r.tickPeriod > 0 && !r.deleted && r.nextTick <= now {
				evs = append(evs, dueEvent{at: r.nextTick, root: r})
			}
		}
	}
	slices.SortFunc(evs, func(a, b dueEvent) int {
		switch {
		case a.at != b.at:
			return cmp.Compare(a.at, b.at)
		case (a.call == nil) != (b.call == nil):
			if a.call != nil {
				return -1
			}
			return 1
		case a.call != nil:
			return cmp.Compare(a.call.ID, b.call.ID)
		}
		return cmp.Compare(a.root.id, b.root.id)
	})
	return evs
}

// expireCall delivers a call's timeout, unless it was answered meanwhile.
func (vm *VM) expireCall(c *HTTPCall) error {
	if !c.claim() {
		return nil
	}
	delete(vm.calls, c.ID)
	vm.h.calls.remove(c)
	return vm.deliverCall(c, timeoutResponse())
}

// tickRoot runs a root context's proxy_on_tick and sets its next tick.
func (vm *VM) tickRoot(r *rootContext, now int64) error {
	if r.deleted || r.tickPeriod <= 0 {
		return nil
	}
	r.nextTick = now + r.tickPeriod
	vm.stack[0] = uint64(r.id)
	return vm.callRoot(r, vm.fn.tick, "proxy_on_tick", 1)
}

// updateDue recomputes the earliest tick or call deadline. Guarded by sem.
func (vm *VM) updateDue() {
	due := int64(math.MaxInt64)
	for _, r := range vm.roots {
		if r.tickPeriod > 0 && !r.deleted && r.nextTick < due {
			due = r.nextTick
		}
	}
	for _, c := range vm.calls {
		if c.deadline != 0 && c.deadline < due {
			due = c.deadline
		}
	}
	if vm.nextDue.Swap(due) != due {
		vm.h.wakeTicker()
	}
}

// queueTick queues a background tick to the VM goroutine (at most one).
func (vm *VM) queueTick() {
	if vm.tickQ.Swap(true) {
		return
	}
	vm.post(func() {
		vm.tickQ.Store(false)
		if err := vm.enter(context.Background()); err != nil {
			return
		}
		defer vm.leave()
		_ = vm.tickLocked()
	})
}
