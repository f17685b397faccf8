# Sluice: every task goes through this file. `make help` lists the targets.

GO        ?= go
BIN       := bin
WASM_ENV  := GOOS=wasip1 GOARCH=wasm
WASM_OUT  := $(BIN)/ratelimit.wasm
FLOOR_OUT := $(BIN)/empty.wasm
# The profile both modules are compiled with (profile-guided optimization;
# `make pgo` refreshes it). The empty plugin gets it too, so that the
# benchmarks' floor is compiled the same way.
PGO       := plugin/default.pgo
GO_FILES  := $(shell find . -name '*.go' -not -path './.cache/*')

# Benchmarks: `make bench BENCH=Stream COUNT=10` then benchstat the output.
BENCH     ?= .
COUNT     ?= 6
BENCHTIME ?= 1s
FUZZTIME  ?= 20s

.PHONY: images push help build wasm native generate test wasm-test lint fmt vet staticcheck generated markers run bench fuzz pgo clean envoyhost envoy-host-test

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: wasm native ## build bin/ratelimit.wasm and the native binaries

wasm: $(WASM_OUT) $(FLOOR_OUT)

$(WASM_OUT): $(GO_FILES) go.mod go.sum $(PGO)
	@mkdir -p $(BIN)
	$(WASM_ENV) $(GO) build -buildmode=c-shared -trimpath -pgo=$(PGO) -o $@ ./plugin

# The empty plugin is the benchmark floor: same host, same SDK, no work.
$(FLOOR_OUT): $(GO_FILES) go.mod go.sum $(PGO)
	@mkdir -p $(BIN)
	$(WASM_ENV) $(GO) build -buildmode=c-shared -trimpath -pgo=$(PGO) -o $@ ./plugin/wasmhost/testdata/empty

native: ## build the native binaries into bin/
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ratelimit-gateway ./plugin/gateway
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ratelimit-admin ./admin

# OCI images without a container engine (admin/images): the filter as a Wasm
# image (compat and oci variants) and the admin and gateway for linux/amd64
# and linux/arm64, as OCI layouts in bin/images/. Reproducible: the creation
# time is the commit's. `make push REGISTRY=host:port[/prefix]` pushes them.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
CREATED  ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
SOURCE   ?= https://github.com/sluice-rl/sluice
LICENCE  ?= Apache-2.0
TAGS     ?= latest
images: wasm ## build the OCI images into bin/images/ (no Docker needed)
	$(GO) run ./admin/images/sluice-images build -out $(BIN)/images -wasm $(WASM_OUT) \
	  -version $(VERSION) -created $(CREATED) -source $(SOURCE) -licence $(LICENCE)

push: ## push bin/images/ to REGISTRY=host:port[/prefix] (tags: the version and TAGS)
	@[ -n "$(REGISTRY)" ] || { echo "make push: set REGISTRY=host:port[/prefix]"; exit 2; }
	$(GO) run ./admin/images/sluice-images push -in $(BIN)/images -registry $(REGISTRY) -tag $(TAGS)

generate: ## regenerate the templ components' _templ.go files (commit them)
	$(GO) generate ./web

# Envoy's own wasm host (proxy-wasm-cpp-host + WAMR, fast interpreter and fast
# JIT) for plugin/envoyhost, built into .cache/envoyhost (or
# $SLUICE_ENVOYHOST_DIR) from the pinned archives in $SLUICE_THIRD_PARTY, or
# downloaded from GitHub without it. A second run rebuilds nothing.
envoyhost: ## build Envoy's wasm host for the real-host tests (needs g++ cmake ninja-build libssl-dev)
	nice -n 10 plugin/envoyhost/build.sh

envoy-host-test: wasm envoyhost ## run only the tests under Envoy's own wasm host; ends with "N passed, N failed"
	@bash -o pipefail -c 'SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -json -timeout 15m ./plugin/envoyhost/... | $(GO) run ./plugin/envoyhost/testcount'

# The Envoy-host package runs on its own after the others: it keeps both
# cores busy for minutes, and the fleet end-to-end tests (real Redis and
# PostgreSQL, real-time timeouts) must not share the machine with it.
test: build lint envoyhost ## build everything, then run every test (what CI runs), Envoy's own wasm host included
	SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/plugin/envoyhost')
	$(MAKE) --no-print-directory wasm-test
	SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m ./plugin/envoyhost/...
	SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -race -timeout 10m ./shared/... ./plugin/wasmhost/... ./admin/store/... ./admin/policies/... ./admin/xds/... ./admin/telemetry/... ./admin/httpapi/... ./admin/fleet/...

# Packages with WebAssembly assembly of their own (plugin/headermap) run
# their tests compiled to wasm as well, under wazero's command line (built
# from the module's wazero): the assembly is what the filter runs.
WASM_TEST_PKGS := ./plugin/headermap
wasm-test: ## run the tests of the packages with WebAssembly assembly as wasm, under wazero
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/wazero github.com/tetratelabs/wazero/cmd/wazero
	$(WASM_ENV) $(GO) test -count=1 -exec "$(CURDIR)/$(BIN)/wazero run -mount /:/ -env-inherit --" $(WASM_TEST_PKGS)

lint: fmt vet staticcheck generated markers ## gofmt, go vet, staticcheck, generated files up to date, no merge conflict markers

fmt:
	@out=$$(gofmt -l $(GO_FILES)); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# markers fails on merge conflict markers left in any tracked file.
markers:
	@if git grep -nE '^(<<<<<<<|>>>>>>>)( |$$)' -- . ':!*.png' 2>/dev/null; then echo "merge conflict markers left in the files above"; exit 1; fi

# The packages compiled into the .wasm, checked once more as wasip1 code.
WASM_PKGS := ./plugin ./plugin/filter ./plugin/headermap ./shared/...

vet:
	$(GO) vet ./...
	$(WASM_ENV) $(GO) vet $(WASM_PKGS)

# staticcheck is a tool of the module (go.mod's tool block), built natively
# once so that it can then check the wasip1 build too. Silence a finding
# only with a //lint:ignore comment that says why.
staticcheck:
	$(GO) build -o $(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck
	$(BIN)/staticcheck ./...
	$(WASM_ENV) $(BIN)/staticcheck $(WASM_PKGS)

# generated fails when a .templ file changed without `make generate`: it
# regenerates and compares checksums (the regenerated files stay, ready to commit).
generated:
	@before=$$(cat web/*_templ.go | cksum); \
	$(GO) tool templ generate -path web >/dev/null 2>&1 || { echo "templ generate failed: run 'make generate'"; exit 1; }; \
	if [ "$$before" != "$$(cat web/*_templ.go | cksum)" ]; then \
	  echo "web/*_templ.go were out of date with their .templ sources; regenerated now: review and commit them"; exit 1; fi

DATA ?= data
# The telemetry token never enters the policy: the initial policy names its
# variable (token_env), the admin gets the token (SLUICE_TELEMETRY_TOKEN) and
# pushes it to the gateway's VMs in the ECDS vm_config environment.
run: build ## start the stack: admin (SQLite in ./data) + dev gateway on ECDS + demo upstream + demo traffic
	@mkdir -p $(DATA) && chmod 700 $(DATA)
	@for f in dev-token telemetry-token; do [ -s $(DATA)/$$f ] || { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > $(DATA)/$$f; chmod 600 $(DATA)/$$f; }; done
	@token=$$(cat $(DATA)/dev-token); ttoken=$$(cat $(DATA)/telemetry-token); \
	sed 's/"mode": "enforce",/"mode": "enforce", "telemetry": {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN"},/' \
	  plugin/gateway/demo-config.json > $(DATA)/initial-policy.json; \
	SLUICE_ADMIN_TOKEN=$$token SLUICE_TELEMETRY_TOKEN=$$ttoken ./$(BIN)/ratelimit-admin -data-dir $(DATA) \
	  -initial-policy $(DATA)/initial-policy.json -initial-tests plugin/gateway/demo-config.tests.yaml \
	  -listen 127.0.0.1:9000 -xds-listen 127.0.0.1:18000 \
	  -wasm-path $(BIN)/ratelimit.wasm & admin=$$!; \
	trap 'kill $$admin 2>/dev/null; wait $$admin 2>/dev/null' EXIT INT TERM; \
	sleep 1; echo; echo "Admin dashboard: http://127.0.0.1:9000   login token: $$token"; echo; \
	./$(BIN)/ratelimit-gateway -upstream demo -config plugin/gateway/demo-config.json -xds 127.0.0.1:18000 \
	  -cluster sluice_admin=http://127.0.0.1:9000 -demo-traffic 40

bench: build ## run benchmarks (BENCH=regex COUNT=n); feed the output to benchstat
	SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) -benchtime $(BENCHTIME) ./...

fuzz: ## run every fuzz target for FUZZTIME each (seed corpora run in `make test` anyway)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; SLUICE_WASM_DIR=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

pgo: ## refresh plugin/default.pgo, the profile the module is compiled with (commit it; see docs/design/performance.md)
	@mkdir -p $(BIN)
	$(GO) test -run '^$$' -bench '^BenchmarkProfileWorkload$$' -benchtime 8000000x -cpuprofile $(BIN)/workload.pprof -o $(BIN)/filter.test ./plugin/filter
	$(GO) tool pprof -proto -focus='sluice-rl/sluice/' $(BIN)/workload.pprof > $(PGO)

clean: ## remove build outputs
	rm -rf $(BIN)
