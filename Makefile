# Sluice: every task goes through this file. `make help` lists the targets.

GO        ?= go
BIN       := bin
WASM_ENV  := GOOS=wasip1 GOARCH=wasm
WASM_OUT  := $(BIN)/ratelimit.wasm
FLOOR_OUT := $(BIN)/empty.wasm
GO_FILES  := $(shell find . -name '*.go' -not -path './.cache/*')

# Benchmarks: `make bench BENCH=Stream COUNT=10` then benchstat the output.
BENCH     ?= .
COUNT     ?= 6
BENCHTIME ?= 1s
FUZZTIME  ?= 20s

.PHONY: help build wasm native test test-unit lint fmt vet run bench fuzz clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: wasm native ## build bin/ratelimit.wasm and the native binaries

wasm: $(WASM_OUT) $(FLOOR_OUT)

$(WASM_OUT): $(GO_FILES) go.mod go.sum
	@mkdir -p $(BIN)
	$(WASM_ENV) $(GO) build -buildmode=c-shared -trimpath -o $@ ./plugin

# The empty plugin is the benchmark floor: same host, same SDK, no work.
$(FLOOR_OUT): $(GO_FILES) go.mod go.sum
	@mkdir -p $(BIN)
	$(WASM_ENV) $(GO) build -buildmode=c-shared -trimpath -o $@ ./plugin/wasmhost/testdata/empty

native: ## build the native binaries into bin/
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ratelimit-gateway ./plugin/gateway

test: build lint ## build everything, then run every test (what CI runs)
	SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m ./...
	SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -race -timeout 10m ./shared/... ./plugin/wasmhost/...

lint: fmt vet ## gofmt and go vet (fails on unformatted files)

fmt:
	@out=$$(gofmt -l $(GO_FILES)); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(WASM_ENV) $(GO) vet ./plugin ./plugin/filter ./shared/...

run: build ## start the development gateway with a demo upstream and demo config
	./$(BIN)/ratelimit-gateway -upstream demo -config plugin/gateway/demo-config.json

bench: build ## run benchmarks (BENCH=regex COUNT=n); feed the output to benchstat
	SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) -benchtime $(BENCHTIME) ./...

fuzz: ## run every fuzz target for FUZZTIME each (seed corpora run in `make test` anyway)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

clean: ## remove build outputs
	rm -rf $(BIN)
