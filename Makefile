# xdpndk: `make help` lists the targets.
#
# Privileged tests (network namespaces, XDP, AF_XDP) need root. Without root they are skipped;
# with XDPNDK_REQUIRE_PRIVILEGED=1 (CI sets it) a skip becomes a failure.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO ?= go

# staticcheck, pinned to a release that supports the Go version in go.mod.
STATICCHECK_VERSION ?= v0.8.2
GOPATH_BIN := $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin
STATICCHECK := $(GOPATH_BIN)/staticcheck

# Tests: the whole suite once, plus a second pass under the race detector over the packages
# where goroutines share state (rings, engine, registries, test helpers). Directories that
# do not exist yet are left out. Packages run in parallel (their privileged tests use
# machine-unique names); each test binary gets TEST_TIMEOUT.
RACE_DIRS ?= internal memreg transport xdp ndk promndk
RACE_PKGS := $(foreach d,$(RACE_DIRS),$(if $(wildcard $(d)/.),./$(d)/...))
TEST_TIMEOUT ?= 10m
TEST_FLAGS ?=
# Tests that measure a rate the machine must deliver run on their own, after the parallel
# pass, not beside the other packages' tests: TestDelayLineRate's forwarder, descheduled
# for 35 ms while the other packages' tests ran, let its 33 ms queue overflow at an offer
# below the line's rate. They still run in every make test.
ALONE_TESTS ?= ^TestDelayLineRate$$
ALONE_PKGS ?= ./internal/delayline

# Fuzzing: every fuzz target of every package, FUZZTIME each (CI runs them all briefly; a
# crasher fails the run and is written to the package's testdata/fuzz, to be committed as a
# seed once fixed). FUZZ narrows the targets by regexp; FUZZJOBS targets fuzz at once.
FUZZTIME ?= 10s
FUZZ ?= .
FUZZJOBS ?= 2

.PHONY: help build test test-race test-all fuzz demo bench bench-compare bench-all bench-link bench-transport bench-ndk bench-path bench-longpath bench-report bench-readme prereq-bench generate check-generate lint staticcheck-install clean cross prereq-test prereq-demo prereq-generate

help:
	@echo "make build           go build ./..."
	@echo "make test            whole test suite incl. privileged tests (run as root), race pass first"
	@echo "make demo            ndkpeer between two namespace hosts: doctor, serve, tour, latency and bandwidth tests (root)"
	@echo "make bench           xdpndk against qperf, iperf3, sockperf, fi_pingpong and the raw links (bench/compare, root; about 14 minutes,"
	@echo "                     BENCH_QUICK=1: about 3) into bench/out/compare.json, then bench-report of it"
	@echo "make bench-all       compare, then the link (root), transport, NDK verbs (root) and real-path (root) benchmarks (bench-link,"
	@echo "                     bench-transport, bench-ndk, bench-path), each into bench/out/<bench>.json, then bench-report of all"
	@echo "make bench-report    merge BENCH_DOCS (default: those of bench/out/{compare,link,transport,ndk,path}.json that exist) into"
	@echo "                     bench/out/results.json, draw its SVGs into bench/out, print its table"
	@echo "make bench-readme    README.md's benchmark section and its SVGs (docs/bench) from bench/out/results.json"
	@echo "make bench-longpath  ndkpeer against iperf3 through the delay line at 1 Gbit/s, RTT 2 and 10 ms (root, about 8 minutes)"
	@echo "make soak            verb mix over AF_XDP with faults for SOAK_DURATION (default $(SOAK_DURATION)), memory and goroutines flat (root)"
	@echo "make generate        regenerate the BPF objects with bpf2go (needs clang)"
	@echo "make cross           go build ./... for $(CROSS_PLATFORMS), and go vet for $(CROSS_VET_PLATFORMS)"
	@echo "make check-generate  regenerate and fail if the BPF objects differ from git"
	@echo "make fuzz            every fuzz target for FUZZTIME each (default $(FUZZTIME); FUZZ=regexp narrows)"
	@echo "make lint            gofmt, go vet, staticcheck $(STATICCHECK_VERSION); for the bench/plot module also go mod tidy -diff"
	@echo "make clean           remove build outputs and cached test results"

build:
	$(GO) build ./...

# Prerequisites: `make test`, `make demo` and `make generate` first run internal/prereq, which
# checks the commands (and C headers) the target needs and, when some are missing, installs
# their Debian packages with apt-get if it runs as root on Debian or Ubuntu, or else stops
# with the command to run. `go run ./internal/prereq ci` checks everything .ci/run needs.
PREREQ = $(GO) run ./internal/prereq

prereq-test:
	@$(PREREQ) test

prereq-demo:
	@$(PREREQ) demo

prereq-generate:
	@$(PREREQ) generate

# The tests run ip, tc, ethtool and sysctl by name (through `ip netns exec`), and Debian
# installs them in /usr/sbin and /sbin, which a non-login PATH may lack: append those
# directories.
test-race test-all demo bench bench-compare bench-all: export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin

# Cross builds: every package must compile for 32-bit Linux, arm64 and macOS (no AF_XDP
# there: the Linux-only parts are left out by build tags). go vet type-checks the packages
# and their tests, so vetting linux/386 and darwin/arm64 covers what building them would
# (a test file that needs Linux says so in its name or build constraint); linux/arm64 and
# darwin/amd64 are built. One 32-bit and one macOS target of each kind: the other arm and
# amd64 variants add nothing our code (no assembly) can break, and CI's time.
CROSS_PLATFORMS ?= linux/arm64 darwin/amd64
CROSS_VET_PLATFORMS ?= linux/386 darwin/arm64

cross:
	@for p in $(CROSS_PLATFORMS); do \
		echo "GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./..."; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./...; \
	done
	@for p in $(CROSS_VET_PLATFORMS); do \
		echo "GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./..."; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./...; \
	done

test: test-race test-all

test-race: prereq-test
	@if [ "$$(id -u)" != 0 ]; then echo "note: not root: privileged tests will be skipped (XDPNDK_REQUIRE_PRIVILEGED=1 turns skips into failures)"; fi
	$(if $(RACE_PKGS),$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(RACE_PKGS),@echo "no packages for the race pass")

test-all: prereq-test
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) -skip '$(ALONE_TESTS)' ./...
	@echo "$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) -run '$(ALONE_TESTS)' $(ALONE_PKGS)"; \
	out=$$($(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) -run '$(ALONE_TESTS)' $(ALONE_PKGS) 2>&1); rc=$$?; \
	echo "$$out"; if [ $$rc = 0 ] && echo "$$out" | grep -q 'no tests to run'; then \
		echo "ALONE_TESTS ($(ALONE_TESTS)) matched no test in $(ALONE_PKGS)"; exit 1; fi; exit $$rc

# internal/fuzzall finds every fuzz target (reading the test files, not building them) and
# runs FUZZJOBS at a time, each with its share of the cores; it also tells the Go 1.26
# toolchain's fuzztime race (golang/go#75804, no crasher written) from a failure.
fuzz:
	$(GO) run ./internal/fuzzall -fuzztime $(FUZZTIME) -jobs $(FUZZJOBS) -run '$(FUZZ)'

demo: prereq-demo
	$(GO) run ./internal/demo

# Every bench writes its document of the shared results schema (bench/README.md, "Results")
# to bench/out/<bench>.json; bench-report merges them into bench/out/results.json (the
# latest make bench), draws it (bench/plot, a module of its own: gonum stays out of ours)
# and prints its Markdown table last. PLOT_SKIP leaves figures out of the plots: ndkbench's
# ping-pongs whose echo waits 1 ms (a measure of CQ.Wait's wake-up, not a latency).
#
# make bench is bench/compare (bench/README.md, "bench: compare"): xdpndk through ndkpeer
# against qperf, iperf3, sockperf, fi_pingpong and the raw AF_XDP links, every system in
# every repetition on one bed; about 14 minutes, BENCH_QUICK=1 about 3 (-quick). It merges
# compare.json alone, so that results.json is what this run measured; make bench-all also
# runs the other four benches (another 6 minutes or so) and merges all five. A compare run
# whose measurements partly failed still writes its document (the failures in its notes
# and under its table), is merged and drawn, and make bench then exits 1.
BENCH_OUT := bench/out
BENCH_NAMES := compare link transport ndk path
BENCH_DOCS ?= $(wildcard $(foreach b,$(BENCH_NAMES),$(BENCH_OUT)/$(b).json))
PLOT_SKIP ?= /send/recv\+1ms
PLOT = cd bench/plot && $(GO) run . -in $(CURDIR)/$(BENCH_OUT)/results.json -skip '$(PLOT_SKIP)'
COMPARE_FLAGS ?= $(if $(BENCH_QUICK),-quick)
# The tables of bench-report and the README show compare at these sizes (the plots and the
# JSON have all of them; so does the table compare prints itself): the quick run's, the raw
# link's 9000 B packets and UDP's largest payload.
SUMMARY_SIZES ?= -sizes compare=64,4096,9000,65507,65536,1048576

bench: prereq-bench
	@rm -f $(BENCH_OUT)/compare.json
	@rc=0; $(GO) run ./bench/cmd/compare -out $(BENCH_OUT)/compare.json $(COMPARE_FLAGS) || rc=$$?; \
	test -f $(BENCH_OUT)/compare.json || exit 1; \
	$(MAKE) --no-print-directory bench-report BENCH_DOCS=$(BENCH_OUT)/compare.json || exit 1; \
	if [ $$rc -ne 0 ]; then echo "make bench: some measurements failed (under the table, and in compare.json's notes)"; fi; \
	exit $$rc

# compare alone, without the report.
bench-compare: prereq-bench
	$(GO) run ./bench/cmd/compare -out $(BENCH_OUT)/compare.json $(COMPARE_FLAGS)

bench-all: prereq-bench
	@rc=0; $(GO) run ./bench/cmd/compare -out $(BENCH_OUT)/compare.json $(COMPARE_FLAGS) || rc=$$?; \
	for b in bench-link bench-transport bench-ndk bench-path; do $(MAKE) --no-print-directory $$b || rc=1; done; \
	$(MAKE) --no-print-directory bench-report BENCH_DOCS="$(foreach b,$(BENCH_NAMES),$(BENCH_OUT)/$(b).json)" || exit 1; \
	exit $$rc

bench-report:
	@test -n "$(strip $(BENCH_DOCS))" || { echo "no bench documents in $(BENCH_OUT): run make bench first"; exit 1; }
	$(GO) run ./bench/cmd/benchreport merge -out $(BENCH_OUT)/results.json $(BENCH_DOCS)
	$(PLOT) -out $(CURDIR)/$(BENCH_OUT)
	@echo
	@$(GO) run ./bench/cmd/benchreport table $(SUMMARY_SIZES) $(BENCH_OUT)/results.json

# README.md's "Benchmarks" section (between <!-- bench:begin --> and <!-- bench:end -->) and
# its figures in docs/bench, from the latest make bench's bench/out/results.json.
bench-readme:
	@test -f $(BENCH_OUT)/results.json || { echo "$(BENCH_OUT)/results.json is missing: run make bench first"; exit 1; }
	$(PLOT) -out $(CURDIR)/docs/bench
	$(GO) run ./bench/cmd/benchreport readme -in $(BENCH_OUT)/results.json -readme README.md -svg docs/bench $(SUMMARY_SIZES)

bench-link:
	$(GO) run ./bench/cmd/linkbench

bench-transport:
	$(GO) run ./bench/cmd/transportbench
	$(GO) test ./transport -run '^$$' -bench BenchmarkEngine -benchmem -count 3

# NDK verbs between the namespace hosts with the raw-link and kernel-TCP baselines of the
# same run, and the goal ratios (bench/README.md); about two minutes.
bench-ndk:
	$(GO) run ./bench/cmd/ndkbench

# Congestion control and loss recovery on real paths (bench/README.md, "bench: real paths"):
# a routed bed with a 2 Gbit/s tc tbf bottleneck (one QP, two QPs, a QP beside an iperf3 TCP
# flow, 1% random loss on the router), the plain bed with 1% and 10% XDP drop; the goals
# with met / NOT met, ndkbench's goodput beside them; about two minutes.
prereq-bench:
	@$(PREREQ) bench

bench-path: export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin
bench-path: prereq-bench
	$(GO) run ./bench/cmd/pathbench

# Long paths (bench/README.md, "bench: long paths"): ndkpeer write-bw and read-bw against
# iperf3 through the routed bed's delay line at 1 Gbit/s, RTT 2 and 10 ms, MTU 1500, alone
# and sharing; about eight minutes, so not part of `make bench`.
bench-longpath: export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin
bench-longpath: prereq-bench
	$(GO) run ./bench/cmd/longpath

# The soak: internal/workload's TestSoak (the verb mix between two namespace hosts over
# AF_XDP, 1% XDP drop both ways plus duplication, reordering and corruption) for
# SOAK_DURATION, sampling RSS and goroutines every second; both must stay flat.
SOAK_DURATION ?= 10m
SOAK_TIMEOUT ?= 60m

.PHONY: soak
soak:
	XDPNDK_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout $(SOAK_TIMEOUT) ./internal/workload

# The BPF programs: the steering program (bpf/) and the test beds' random-loss classifier
# (internal/tcloss/).
BPF_DIRS := bpf internal/tcloss

generate: prereq-generate
	$(GO) generate $(foreach d,$(BPF_DIRS),./$(d)/...)

check-generate: generate
	@if ! git diff --exit-code --stat -- $(BPF_DIRS); then \
		echo "$(BPF_DIRS): regenerated files differ from the committed ones: run 'make generate' and commit the result"; \
		exit 1; \
	fi
	@untracked="$$(git ls-files --others --exclude-standard -- $(BPF_DIRS))"; \
	if [ -n "$$untracked" ]; then \
		echo "generated files not committed: $$untracked"; \
		exit 1; \
	fi
	@echo "$(BPF_DIRS): generated files match the committed ones"

# bench/plot is a module of its own: ./... of the main module leaves it out, so it is
# vetted, checked and tidied on its own (gofmt -l . covers its files already).
PLOT_MOD := bench/plot

lint: staticcheck-install
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need formatting:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd $(PLOT_MOD) && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) mod tidy -diff

# Installs the pinned staticcheck into GOPATH/bin unless that exact version is already there.
staticcheck-install:
	@if ! "$(STATICCHECK)" -version 2>/dev/null | grep -qF "($(STATICCHECK_VERSION:v%=%))"; then \
		echo "installing staticcheck $(STATICCHECK_VERSION) into $(GOPATH_BIN)"; \
		GOBIN="$(GOPATH_BIN)" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi

clean:
	$(GO) clean ./...
	$(GO) clean -testcache
