package headermap

// Index is documented at indexGo; this one is index_wasm.s.
//
//go:noescape
func Index(b []byte, names []string, mask uint64, found []uint64) int
