//go:build !wasm

package headermap

// Index is documented at indexGo, which it is outside WebAssembly.
func Index(b []byte, names *Names, found []uint64) int {
	return indexGo(b, names, found)
}
