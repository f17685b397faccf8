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
