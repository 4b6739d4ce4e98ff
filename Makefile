# throttled: make help lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

GO       ?= go
# A count of executions, not a duration: Go 1.26's fuzz coordinator can
# report a spurious "context deadline exceeded" when a duration runs out
# while a worker is mid-call on a loaded machine (fixed in Go 1.27).
FUZZTIME ?= 40000x
BIN      := bin/throttled
# The lab build: the product plus demo, bench and sim, which launch
# throwaway clusters, replay workloads, simulate and plot. The production
# binary and image are built without the tag and carry none of it.
LABTAGS  := -tags lab
LAB      := bin/throttled-lab
# Where the test run and the demo draw the overview's key series (PNG).
PLOTS    := out/plots

# Every fuzz target, as package:Target.
FUZZ_TARGETS := \
	./signals:FuzzConninfoValue \
	./signals:FuzzPgBouncerRows \
	./signals:FuzzSelectors \
	./signals:FuzzDatedSelectors \
	./throttle/hold:FuzzParseWindow \
	./cmd/throttled:FuzzParseSignalsFlags \
	./cmd/throttled:FuzzParseExecFlags \
	./config:FuzzParse \
	./throttle/hold:FuzzParseScope \
	./sidecar:FuzzReturnURL \
	./sidecar:FuzzCSRF \
	./sidecar:FuzzGrafanaAuth \
	./sidecar:FuzzGrafanaPayload \
	./sidecar:FuzzRequestBodies \
	./sidecar:FuzzRoutes \
	./sidecar:FuzzStatusFinite \
	./throttle/hold:FuzzStorable \
	./throttle/hold:FuzzHoldRequestBounds

.PHONY: help
help: ## list the targets
	@echo "throttled: adaptive background-job throttler for PostgreSQL"
	@echo
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# Each target installs what it uses and no more: the demo needs PostgreSQL
# alone, the test run everything.
ENSURE_ALL := scripts/ensure-postgres scripts/ensure-patroni scripts/ensure-pgbouncer scripts/ensure-podman \
	scripts/ensure-alertmanager scripts/ensure-promtool scripts/ensure-chromium

.PHONY: deps
deps: deps-go packages ## everything the test run uses: PostgreSQL, Patroni and etcd, PgBouncer, podman, Alertmanager, Prometheus (with promtool) and Chromium if missing, in one install; Go modules

.PHONY: packages
packages: ## the Debian packages make test uses, if missing, in one apt transaction
	@scripts/install-together $(ENSURE_ALL)

.PHONY: deps-postgres
deps-postgres: deps-go ## PostgreSQL's server (the throwaway pair) if missing, and Go modules: what demo, bench, replay, load and chaos use
	@scripts/ensure-postgres

.PHONY: deps-go
deps-go: ## download Go modules
	@$(GO) mod download
	@cd deploy && $(GO) mod download

.PHONY: build
build: ## build bin/throttled, the production binary (no demo, bench or sim)
	$(GO) build -o $(BIN) ./cmd/throttled

.PHONY: lab
lab: ## build bin/throttled-lab: the product plus demo, bench and sim (throwaway clusters, replay, simulator, plots)
	$(GO) build $(LABTAGS) -o $(LAB) ./cmd/throttled

.PHONY: man
man: ## write the manual pages, one per command (roff), into out/man; read one with man -l out/man/throttled.1
	$(GO) run ./cmd/throttled man --dir out/man

.PHONY: image
image: ## build the container image throttled:dev (Containerfile: a static binary FROM scratch, non-root) with buildah or podman
	@scripts/ensure-podman
	scripts/build-image throttled:dev

.PHONY: chaos
chaos: deps-postgres ## the fault campaign: every fault one after another under load, invariants after each (a few minutes); table in docs/CHAOS.md
	THROTTLED_CHAOS=full THROTTLED_CHAOS_SEED=$${SEED:-1} THROTTLED_CHAOS_DOC=$(CURDIR)/docs/CHAOS.md $(GO) test $(LABTAGS) -count=1 -timeout 30m -run '^TestChaosCampaign$$' -v ./internal/testenv/chaos/

.PHONY: transcript
transcript: deps-postgres ## regenerate docs/NEWCOMER.md: a newcomer's path (help, lint, image, a freno HEAD check, a live override on a running exec), run on a throwaway pair
	@scripts/ensure-podman
	THROTTLED_TRANSCRIPT=$(CURDIR)/docs/NEWCOMER.md $(GO) test -count=1 -run '^TestNewcomerTranscript$$' -v ./cmd/throttled/

.PHONY: demo
demo: deps-postgres lab ## run the main job live against a throwaway primary and replica (about a minute); plot in out/plots
	$(LAB) demo --plots $(PLOTS)

.PHONY: vet
vet: ## gofmt, go vet of the product and the lab build, the deploy module's vet and tests
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet $(LABTAGS) ./...
	cd deploy && $(GO) vet ./... && $(GO) test -count=1 ./...

# The fuzz run within make test: a quarter of make fuzz's, every target.
TEST_FUZZTIME ?= 10000x

# The builds the tests make, made ahead into the build cache while the
# packages install: every package under -race. (The image's static binary
# is built by its test, while the others wait on their clocks.)
.PHONY: warm-build
warm-build: vet
	$(GO) build $(LABTAGS) -race ./...

.PHONY: test
test: deps-go ## vet, all tests under -race against a real primary and replica, a short fuzz run
	@# The packages install (network and dpkg) while vet and the builds use
	@# the CPU; the tests start once both are done.
	@$(MAKE) --no-print-directory -j2 --output-sync=target packages warm-build
	mkdir -p $(PLOTS)
	THROTTLED_PLOTS=$(CURDIR)/$(PLOTS) GO=$(GO) TEST_TAGS="$(LABTAGS)" scripts/test-race
	@# The replay's short version measures latency: alone, after the rest.
	THROTTLED_REPLAY_SHORT=1 $(GO) test $(LABTAGS) -count=1 -timeout 8m -run '^TestReplayShortHasPower$$' -v ./cmd/throttled
	promtool check rules deploy/alerts.yml
	promtool test rules deploy/alerts_test.yml
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME executions (default 40000x; a duration such as 1m also works), two at a time
	@GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz-all $(FUZZ_TARGETS)

# Runs of each micro-benchmark in `make bench`.
BENCH_COUNT ?= 5
BENCH_OUT   := out/bench.txt

.PHONY: bench
bench: deps-postgres ## run the micro-benchmarks beside their anchors, then the idle- and quiet-primary rows on a throwaway pair (about 15 minutes); tables in docs/BENCHMARKS.md
	@mkdir -p out
	@set -eo pipefail; \
	$(GO) test -run='^$$' -bench='^BenchmarkLimiterWait' -benchmem -count=$(BENCH_COUNT) ./throttle/limit | tee $(BENCH_OUT); \
	$(GO) test -run='^$$' -bench='^BenchmarkStep' -benchmem -count=$(BENCH_COUNT) ./throttle | tee -a $(BENCH_OUT); \
	$(GO) test -run='^$$' -bench='^BenchmarkClientAcquire' -benchmem -count=$(BENCH_COUNT) . | tee -a $(BENCH_OUT); \
	$(GO) test -run='^$$' -bench='^Benchmark(Check|Acquire)' -benchmem -count=$(BENCH_COUNT) ./sidecar | tee -a $(BENCH_OUT); \
	$(GO) test -run='^$$' -bench='^BenchmarkTick$$' -benchmem -count=$(BENCH_COUNT) ./signals | tee -a $(BENCH_OUT); \
	$(GO) test -run='^$$' -bench='^BenchmarkSamplerCost' -benchtime=1x -count=1 -timeout=10m . | tee -a $(BENCH_OUT); \
	THROTTLED_BENCH_DOC=$(CURDIR)/docs/BENCHMARKS.md $(GO) test -run='^$$' -bench='^Benchmark(IdlePrimary|QuietPrimary)$$' -benchtime=1x -count=1 -timeout=20m $(LABTAGS) ./cmd/throttled | tee -a $(BENCH_OUT)
	$(GO) run ./internal/lab/benchdoc/cmd/benchdoc -in $(BENCH_OUT) -doc docs/BENCHMARKS.md

.PHONY: failover
failover: deps-postgres ## the Patroni failover test (switchover, kill -9 of the leader's postmaster; about a minute); table in docs/FAILOVER.md
	@scripts/ensure-patroni
	THROTTLED_FAILOVER_DOC=docs/FAILOVER.md $(GO) test -race -count=1 -run '^TestFailover$$' -v ./internal/testenv/patronicluster/

# Flags for `make replay`, such as REPLAY_FLAGS="--calibrate"; SCENARIO=surge
# runs one scenario and merges it into docs/BENCHMARKS.md.
REPLAY_FLAGS ?=
SCENARIO     ?= all

# The sidecar under load: TestSidecarUnderLoad's full shape for LOAD_SECONDS.
LOAD_SECONDS ?= 60

.PHONY: load
load: deps-postgres ## the sidecar under load: 1,000 /check clients, 200 remote workers, slow clients, the primary stopped 10 s (about 80 s); figures in docs/BENCHMARKS.md
	THROTTLED_LOAD_SECONDS=$(LOAD_SECONDS) THROTTLED_LOAD_DOC=$(CURDIR)/docs/BENCHMARKS.md \
		$(GO) test $(LABTAGS) -run='^TestSidecarUnderLoad$$' -count=1 -v -timeout=10m ./sidecar

.PHONY: sim-fit
sim-fit: ## refit the simulator's latency model to the replay's results (docs/replay) into internal/lab/sim/plantfit.json; rewrite docs/SIMULATION.md's tables
	$(GO) run $(LABTAGS) ./cmd/throttled sim fit --results docs/replay --out internal/lab/sim/plantfit.json
	$(GO) test $(LABTAGS) -count=1 -run '^(TestSimFitDocIsCurrent|TestSimulationDocIsCurrent)$$' ./cmd/throttled -update

.PHONY: sim-search
sim-search: ## search the canary's target and the controller's growth and breach memory in simulation (about two minutes); rewrite docs/SIMULATION.md's section on it
	$(GO) run $(LABTAGS) ./cmd/throttled sim search --doc docs/SIMULATION.md

.PHONY: replay
replay: deps-postgres lab ## the replay benchmark: every scenario as one block of interleaved windows (about 70 minutes; SCENARIO=surge runs one, about 8); results in docs/replay, tables in docs/BENCHMARKS.md
	@scripts/ensure-promtool
	$(LAB) bench replay --scenario $(SCENARIO) --results docs/replay --doc docs/BENCHMARKS.md $(REPLAY_FLAGS)

.PHONY: replay-app
replay-app: deps-postgres lab ## adaptive-app (the application's own p99 from a real Prometheus) beside adaptive in surge, quiet and write-heavy (about 30 minutes); tables in docs/BENCHMARKS.md
	@scripts/ensure-promtool
	@for s in surge quiet write-heavy; do \
		$(LAB) bench replay --scenario $$s --policy a/a,adaptive,adaptive-app,unthrottled,fixed --results docs/replay --doc docs/BENCHMARKS.md || exit 1; \
	done

.PHONY: step
step: deps-postgres lab ## adaptive's step response on a throwaway pair: onset to first cut, relief to 80 % of the budget, ten onsets each in surge and write-heavy (its foreground doubled), p50 and p95 (about 16 minutes); table in docs/BENCHMARKS.md
	$(LAB) bench step --scenario surge,write-heavy --reps 10 --on 10s --off 30s --results docs/replay --doc docs/BENCHMARKS.md

.PHONY: replay-windows
replay-windows: deps-postgres lab ## the window table: surge and quiet at windows of 2, 5, 10 and 20 s (about 25 minutes); table in docs/BENCHMARKS.md
	$(LAB) bench replay --window-table --scenario surge,quiet --results docs/replay --doc docs/BENCHMARKS.md

.PHONY: clean
clean: ## remove build output
	rm -rf bin out
