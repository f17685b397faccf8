package wasmhost

import (
	"context"
	"fmt"
	"sync"
)

// post queues f to the VM goroutine.
func (vm *VM) post(f func()) { vm.async.push(f) }

// Drain waits until the VM goroutine has run the work queued before the call.
func (vm *VM) Drain(ctx context.Context) error {
	done := make(chan struct{})
	vm.post(func() { close(done) })
	select {
	case <-done:
		return vm.Err()
	case <-ctx.Done():
		return ctx.Err()
	case <-vm.loopD:
		return ErrClosed
	}
}

func (vm *VM) loop() {
	defer close(vm.loopD)
	for {
		select {
		case <-vm.stop:
			return
		case <-vm.async.wake:
		}
		for {
			f := vm.async.pop()
			if f == nil {
				break
			}
			f()
		}
	}
}

// stopLoop stops the VM goroutine. Work queued later (or left in the
// queue) runs on a new goroutine each and finds the VM closed.
func (vm *VM) stopLoop() {
	select {
	case <-vm.stop:
	default:
		close(vm.stop)
	}
	<-vm.loopD
	for _, f := range vm.async.close() {
		go f()
	}
}

// close marks the VM closed and fails what waits on it.
func (vm *VM) close(ctx context.Context) error {
	vm.stopLoop()
	select {
	case vm.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wasmhost: vm %d still running a callback at Close: %w", vm.id, ctx.Err())
	}
	vm.closed = true
	for _, s := range vm.streams {
		s.settle(settleError, ErrClosed)
	}
	for _, c := range vm.calls {
		c.cancel(ErrClosed)
	}
	vm.calls = map[uint32]*HTTPCall{}
	modules.Delete(vm.mod)
	<-vm.sem
	return nil
}

// asyncQueue is an unbounded FIFO of work for the VM goroutine.
type asyncQueue struct {
	mu     sync.Mutex
	jobs   []func()
	closed bool
	wake   chan struct{}
}

func (q *asyncQueue) init() { q.wake = make(chan struct{}, 1) }

func (q *asyncQueue) push(f func()) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		go f()
		return
	}
	q.jobs = append(q.jobs, f)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close refuses further jobs and returns those still queued.
func (q *asyncQueue) close() []func() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	jobs := q.jobs
	q.jobs = nil
	return jobs
}

func (q *asyncQueue) pop() func() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 {
		return nil
	}
	f := q.jobs[0]
	q.jobs[0] = nil
	q.jobs = q.jobs[1:]
	return f
}
