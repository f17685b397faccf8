package wasmhost

import "encoding/binary"

// Guest memory helpers: views of the module's memory, copies out to
// guest-allocated buffers, and the proxy-wasm pairs encoding of header maps.

// view returns guest memory [ptr, ptr+size) without copying. A view is
// invalid after anything that may grow memory (malloc).
func (vm *VM) view(ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return vm.mem.Read(ptr, size)
}

// copyOut returns data to the guest as proxy-wasm-cpp-host does: allocate
// in the guest (malloc or proxy_on_memory_allocate) and write the pointer and size;
// empty data is returned as pointer 0, size 0 without allocating.
func copyOut[T string | []byte](vm *VM, data T, ptrPtr, sizePtr uint32) Status {
	var ptr uint32
	if len(data) > 0 {
		ptr = vm.malloc(uint32(len(data)))
		buf, ok := vm.mem.Read(ptr, uint32(len(data)))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		copy(buf, data)
	}
	if !vm.mem.WriteUint32Le(ptrPtr, ptr) || !vm.mem.WriteUint32Le(sizePtr, uint32(len(data))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// pairsSize is the size of h in the proxy-wasm map encoding.
func pairsSize(h []Header) int {
	size := 4
	for _, kv := range h {
		size += 8 + len(kv[0]) + len(kv[1]) + 2
	}
	return size
}

// marshalPairs encodes h into buf (len(buf) == pairsSize(h)):
// count, then (name size, value size) per entry, then names and values,
// each followed by a NUL.
func marshalPairs(buf []byte, h []Header) {
	binary.LittleEndian.PutUint32(buf, uint32(len(h)))
	p := 4
	for _, kv := range h {
		binary.LittleEndian.PutUint32(buf[p:], uint32(len(kv[0])))
		binary.LittleEndian.PutUint32(buf[p+4:], uint32(len(kv[1])))
		p += 8
	}
	for _, kv := range h {
		p += copy(buf[p:], kv[0])
		buf[p] = 0
		p++
		p += copy(buf[p:], kv[1])
		buf[p] = 0
		p++
	}
}

func exportPairs(vm *VM, h []Header, ptrPtr, sizePtr uint32) Status {
	if len(h) == 0 {
		if !vm.mem.WriteUint32Le(ptrPtr, 0) || !vm.mem.WriteUint32Le(sizePtr, 0) {
			return StatusInvalidMemoryAccess
		}
		return StatusOK
	}
	size := uint32(pairsSize(h))
	ptr := vm.malloc(size)
	buf, ok := vm.mem.Read(ptr, size)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	marshalPairs(buf, h)
	if !vm.mem.WriteUint32Le(ptrPtr, ptr) || !vm.mem.WriteUint32Le(sizePtr, size) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// parsePairs decodes a proxy-wasm map, lower-casing names if lowerNames.
// It never panics on malformed input.
func parsePairs(b []byte, lowerNames bool) ([]Header, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if len(b) < 4 {
		return nil, false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if 4+n*8 > uint64(len(b)) {
		return nil, false
	}
	out := make([]Header, 0, n)
	sizes := 4
	data := uint64(4 + n*8)
	for i := uint64(0); i < n; i++ {
		ks := uint64(binary.LittleEndian.Uint32(b[sizes:]))
		vs := uint64(binary.LittleEndian.Uint32(b[sizes+4:]))
		sizes += 8
		if data+ks+1+vs+1 > uint64(len(b)) {
			return nil, false
		}
		k := string(b[data : data+ks])
		data += ks + 1
		v := string(b[data : data+vs])
		data += vs + 1
		if lowerNames {
			k = lower(k)
		}
		out = append(out, Header{k, v})
	}
	return out, true
}

// lowerKey returns b lower-cased, in vm.scratch if it had to change.
func (vm *VM) lowerKey(b []byte) []byte {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			s := append(vm.scratch[:0], b...)
			for j := i; j < len(s); j++ {
				if c := s[j]; 'A' <= c && c <= 'Z' {
					s[j] = c + 'a' - 'A'
				}
			}
			vm.scratch = s
			return s
		}
	}
	return b
}

func u32(v uint64) uint32 { return uint32(v) }
