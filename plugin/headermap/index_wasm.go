package headermap

// Index is documented at indexGo; this one is index_wasm.s.
//
//go:noescape
func Index(b []byte, names *Names, found []uint64) int
