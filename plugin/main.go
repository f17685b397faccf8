// Command plugin is the Sluice rate-limiting filter, compiled to a proxy-wasm
// module (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared). In c-shared mode
// main never runs: the filter registers itself in init.
package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluice-rl/sluice/plugin/filter"
)

func init() {
	proxywasm.SetVMContext(filter.NewVMContext())
}

func main() {}
