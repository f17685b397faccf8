//go:build wasip1

package main

import (
	"encoding/hex"
	"strconv"
	"unsafe"
)

// Raw ABI calls the SDK does not expose, or whose bytes the SDK decodes
// before a test could see them.

//go:wasmimport env proxy_get_header_map_pairs
func rawGetHeaderMapPairs(mapType uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_size
func rawGetHeaderMapSize(mapType uint32, retSize unsafe.Pointer) uint32

// rawPairs returns the map's bytes exactly as the host encoded them, in hex.
func rawPairs(mapType uint32) string {
	var data *byte
	var size uint32
	if st := rawGetHeaderMapPairs(mapType, unsafe.Pointer(&data), unsafe.Pointer(&size)); st != 0 {
		return "err:status_" + strconv.Itoa(int(st))
	}
	if data == nil || size == 0 {
		return "empty"
	}
	return hex.EncodeToString(unsafe.Slice(data, size))
}

// mapSize returns what proxy_get_header_map_size reports.
func mapSize(mapType uint32) string {
	var size uint32
	if st := rawGetHeaderMapSize(mapType, unsafe.Pointer(&size)); st != 0 {
		return "err:status_" + strconv.Itoa(int(st))
	}
	return strconv.FormatUint(uint64(size), 10)
}

//go:wasmimport env proxy_get_buffer_bytes
func rawGetBufferBytes(bufferType, start, maxSize uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_buffer_status
func rawGetBufferStatus(bufferType uint32, retLength unsafe.Pointer, retFlags unsafe.Pointer) uint32

// rawBuffer returns what proxy_get_buffer_bytes answers, without the SDK's
// reading of a null pointer as NotFound: "st=<status> ptr=<null|set>
// size=<size> data=<hex>". The pointer and size start as garbage, to show
// whether the host wrote them.
func rawBuffer(bufferType, start, maxSize uint32) string {
	var garbage byte
	data, size := &garbage, uint32(0xdead)
	st := rawGetBufferBytes(bufferType, start, maxSize, unsafe.Pointer(&data), unsafe.Pointer(&size))
	ptr := "set"
	if data == nil {
		ptr = "null"
	}
	out := "st=" + strconv.Itoa(int(st)) + " ptr=" + ptr + " size=" + strconv.FormatUint(uint64(size), 10)
	if st == 0 && data != nil && data != &garbage && size != 0xdead {
		out += " data=" + hex.EncodeToString(unsafe.Slice(data, size))
	}
	return out
}

// bufferStatus returns what proxy_get_buffer_status answers:
// "st=<status> length=<length> flags=<flags>".
func bufferStatus(bufferType uint32) string {
	length, flags := uint32(0xdead), uint32(0xdead)
	st := rawGetBufferStatus(bufferType, unsafe.Pointer(&length), unsafe.Pointer(&flags))
	return "st=" + strconv.Itoa(int(st)) + " length=" + strconv.FormatUint(uint64(length), 10) +
		" flags=" + strconv.FormatUint(uint64(flags), 10)
}
