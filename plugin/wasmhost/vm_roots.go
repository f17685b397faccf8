package wasmhost

import (
	"context"
	"errors"
	"math"
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

func (vm *VM) tickLocked() error {
	now := vm.h.clocks.nanotime()
	for id, c := range vm.calls {
		if c.deadline != 0 && c.deadline <= now && c.claim() {
			delete(vm.calls, id)
			vm.h.calls.remove(c)
			if err := vm.deliverCall(c, timeoutResponse()); err != nil {
				return err
			}
		}
	}
	if vm.fn.tick != nil {
		for _, root := range vm.rootsByID() {
			if root.tickPeriod <= 0 || root.deleted || now < root.nextTick {
				continue
			}
			root.nextTick = now + root.tickPeriod
			vm.stack[0] = uint64(root.id)
			if err := vm.callRoot(root, vm.fn.tick, "proxy_on_tick", 1); err != nil {
				return err
			}
		}
	}
	vm.updateDue()
	return nil
}

// rootsByID returns the live root contexts, oldest first.
func (vm *VM) rootsByID() []*rootContext {
	if len(vm.roots) == 1 {
		for _, r := range vm.roots {
			return []*rootContext{r}
		}
	}
	rs := make([]*rootContext, 0, len(vm.roots))
	for _, r := range vm.roots {
		rs = append(rs, r)
	}
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].id < rs[j-1].id; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
	return rs
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
