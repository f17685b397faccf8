package wasmhost

import "sync"

// sharedQueues are proxy-wasm shared queues, as in proxy-wasm-cpp-host:
// a queue is named by (vm_id, name); registering it again returns the same
// id and makes the last registrant the one notified (proxy_on_queue_ready,
// posted to its VM) when an item is enqueued.
type sharedQueues struct {
	mu     sync.Mutex
	byName map[[2]string]uint32
	queues map[uint32]*sharedQueue
	next   uint32
}

type sharedQueue struct {
	items [][]byte
	vm    *VM
	ctxID uint32
}

func (q *sharedQueues) init() {
	q.byName = map[[2]string]uint32{}
	q.queues = map[uint32]*sharedQueue{}
	q.next = 1
}

func (q *sharedQueues) register(vmID, name string, vm *VM, ctxID uint32) uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := [2]string{vmID, name}
	id, ok := q.byName[key]
	if !ok {
		id = q.next
		q.next++
		if q.next == 0 {
			q.next = 1
		}
		q.byName[key] = id
		q.queues[id] = &sharedQueue{}
	}
	sq := q.queues[id]
	sq.vm, sq.ctxID = vm, ctxID
	return id
}

func (q *sharedQueues) resolve(vmID, name string) (uint32, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	id, ok := q.byName[[2]string{vmID, name}]
	return id, ok
}

// enqueue appends item and returns whom to notify.
func (q *sharedQueues) enqueue(id uint32, item []byte) (*VM, uint32, Status) {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.queues[id]
	if sq == nil {
		return nil, 0, StatusNotFound
	}
	sq.items = append(sq.items, item)
	return sq.vm, sq.ctxID, StatusOK
}

func (q *sharedQueues) dequeue(id uint32) ([]byte, Status) {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.queues[id]
	if sq == nil {
		return nil, StatusNotFound
	}
	if len(sq.items) == 0 {
		return nil, StatusEmpty
	}
	item := sq.items[0]
	sq.items[0] = nil
	sq.items = sq.items[1:]
	return item, StatusOK
}

// notifyQueue posts proxy_on_queue_ready(ctxID, id) to vm.
func (vm *VM) notifyQueue(ctxID, id uint32) {
	vm.post(func() {
		if err := vm.enter(vm.ctx); err != nil {
			return
		}
		defer vm.leave()
		root := vm.roots[ctxID]
		if root == nil || root.deleted || vm.fn.queueReady == nil {
			return
		}
		vm.stack[0], vm.stack[1] = uint64(ctxID), uint64(id)
		_ = vm.callRoot(root, vm.fn.queueReady, "proxy_on_queue_ready", 2)
	})
}
