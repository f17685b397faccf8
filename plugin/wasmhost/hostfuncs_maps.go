package wasmhost

// The host functions over header maps and buffers: get, add, replace,
// remove, whole-map get and set, sizes, and the body and call buffers.

// headerMap returns the map of type t for the current context, and whether
// it may be modified. A map that does not exist now (the response headers
// during the request phase, any map outside a stream) gives BadArgument,
// as in Envoy.
func (vm *VM) headerMap(t uint32, write bool) (*[]Header, Status) {
	switch t {
	case mapRequestHeaders, mapResponseHeaders:
		s := vm.cur.stream
		if s == nil {
			return nil, StatusBadArgument
		}
		if write && s.state >= stFinishing {
			return nil, StatusBadArgument // access-log phase: maps are read-only
		}
		if t == mapRequestHeaders {
			if !s.hasReq {
				return nil, StatusBadArgument
			}
			if write && s.reqShared {
				s.req, s.reqShared = cloneHeaders(s.req), false
			}
			return &s.req, StatusOK
		}
		if !s.hasResp {
			return nil, StatusBadArgument
		}
		if write && s.respShared {
			s.resp, s.respShared = cloneHeaders(s.resp), false
		}
		return &s.resp, StatusOK
	case mapResponseTrailers:
		s := vm.cur.stream
		if s == nil || !s.hasTrailers || write {
			return nil, StatusBadArgument // read-only here: the filter only reads them
		}
		return &s.trailers, StatusOK
	case mapHTTPCallRespHeaders, mapHTTPCallRespTrailers:
		r := vm.cur.callResp
		if r == nil {
			return nil, StatusBadArgument
		}
		if t == mapHTTPCallRespHeaders {
			return &r.headers, StatusOK
		}
		return &r.trailers, StatusOK
	}
	return nil, StatusBadArgument
}

func hGetHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), false)
	if status != StatusOK {
		return status
	}
	kb, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	key := vm.lowerKey(kb)
	for _, kv := range *m {
		if kv[0] == string(key) {
			return copyOut(vm, kv[1], u32(st[3]), u32(st[4]))
		}
	}
	return StatusNotFound
}

func (vm *VM) headerKV(st []uint64) (string, string, Status) {
	kb, ok1 := vm.view(u32(st[1]), u32(st[2]))
	vb, ok2 := vm.view(u32(st[3]), u32(st[4]))
	if !ok1 || !ok2 {
		return "", "", StatusInvalidMemoryAccess
	}
	return string(vm.lowerKey(kb)), string(vb), StatusOK
}

func hAddHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	k, v, status := vm.headerKV(st)
	if status != StatusOK {
		return status
	}
	*m = append(*m, Header{k, v})
	return StatusOK
}

func hReplaceHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	k, v, status := vm.headerKV(st)
	if status != StatusOK {
		return status
	}
	for i := range *m {
		if (*m)[i][0] == k {
			(*m)[i][1] = v
			return StatusOK
		}
	}
	*m = append(*m, Header{k, v})
	return StatusOK
}

func hRemoveHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	kb, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	key := vm.lowerKey(kb)
	out := (*m)[:0]
	for _, kv := range *m {
		if kv[0] != string(key) {
			out = append(out, kv)
		}
	}
	clear((*m)[len(out):])
	*m = out
	return StatusOK
}

func hGetPairs(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), false)
	if status != StatusOK {
		return status
	}
	return exportPairs(vm, *m, u32(st[1]), u32(st[2]))
}

func hSetPairs(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	b, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h, ok := parsePairs(b, true)
	if !ok {
		return StatusBadArgument
	}
	*m = h
	return StatusOK
}

// hGetMapSize reports the map's size as Envoy does (HeaderMap::byteSize):
// the bytes of its names and values, not of its pairs encoding.
func hGetMapSize(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), false)
	if status != StatusOK {
		return status
	}
	size := 0
	for _, kv := range *m {
		size += len(kv[0]) + len(kv[1])
	}
	if !vm.mem.WriteUint32Le(u32(st[1]), uint32(size)) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// buffer returns the buffer of type t available now, or nil.
func (vm *VM) buffer(t uint32) ([]byte, bool) {
	switch t {
	case bufVMConfiguration:
		return vm.h.cfg.VMConfig, true
	case bufPluginConfiguration:
		if vm.cur.configuring {
			return vm.cur.pluginConfig, true
		}
	case bufHTTPCallResponse:
		if r := vm.cur.callResp; r != nil {
			return r.body, true
		}
	case bufResponseBody:
		// Envoy (Context::getBuffer) always has this buffer: the current
		// chunk during on_response_body, else empty.
		if s := vm.cur.stream; s != nil && s.inBody {
			return s.chunk, true
		}
		return nil, true
	}
	return nil, false
}

func hGetBuffer(vm *VM, st []uint64) Status {
	t := u32(st[0])
	if t > bufMax {
		return StatusBadArgument
	}
	buf, ok := vm.buffer(t)
	if !ok {
		return StatusNotFound
	}
	// As proxy-wasm-cpp-host's get_buffer_bytes: the range is clipped to
	// the buffer (a start past its end reads nothing); reading nothing is
	// Ok with a null pointer and size 0 written (the Go SDK then reports
	// NotFound).
	start, length := uint64(u32(st[1])), uint64(u32(st[2]))
	if start > uint64(len(buf)) {
		length = 0
	} else if start+length > uint64(len(buf)) {
		length = uint64(len(buf)) - start
	}
	if length == 0 {
		return copyOut(vm, buf[:0], u32(st[3]), u32(st[4]))
	}
	return copyOut(vm, buf[start:start+length], u32(st[3]), u32(st[4]))
}

func hSetBuffer(vm *VM, st []uint64) Status {
	t := u32(st[0])
	if t > bufMax {
		return StatusBadArgument
	}
	if _, ok := vm.buffer(t); !ok {
		return StatusNotFound
	}
	return StatusUnimplemented // the available buffers are read-only
}

func hGetBufferStatus(vm *VM, st []uint64) Status {
	t := u32(st[0])
	buf, ok := vm.buffer(t)
	if !ok {
		return StatusNotFound
	}
	if !vm.mem.WriteUint32Le(u32(st[1]), uint32(len(buf))) || !vm.mem.WriteUint32Le(u32(st[2]), 0) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}
