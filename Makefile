# agentd — build, run and check.
#
#   make run     build bin/agentd and run it with no configuration
#   make test    vet, race-enabled tests (shuffled), one pass of every benchmark
#   make help    list every target
#
# Variables: FUZZTIME (default 10s), BENCHCOUNT (default 6), ARGS (extra
# arguments for `make run`, e.g. ARGS='--data-dir /tmp/a --api 127.0.0.1:4788').

SHELL       := /bin/bash
GO          ?= go
PKGS        ?= ./...
BIN         := bin
TOOLS       := $(BIN)/tools
FUZZTIME    ?= 10s
BENCHCOUNT  ?= 6
BENCHTIME   ?= 1s
TEST_TIMEOUT ?= 14m
ARGS        ?=

STATICCHECK_VERSION   := v0.8.2
GOLANGCI_LINT_VERSION := v2.15.0

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.DEFAULT_GOAL := build

.PHONY: help build static bootstrap-load run test race bench fuzz lint golangci-lint tidy simnet simnet-smoke simnet-curve bench-scale console-screenshots clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 16

# The version and commit come from git through -ldflags; -buildvcs=false
# keeps the build working where Go cannot query git itself (no git binary,
# a checkout owned by another user).
build: ## build bin/agentd
	$(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(BIN)/agentd ./cmd/agentd

# static is the binary of deploy/container/Containerfile: no cgo, so no libc
# to ship (the race detector needs cgo; the daemon does not).
static: ## build bin/agentd-static (CGO_ENABLED=0, for the container image)
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS) -s -w' -o $(BIN)/agentd-static ./cmd/agentd

run: build ## build, then run the daemon with no configuration (Ctrl-C stops it)
	$(BIN)/agentd run $(ARGS)

test: ## go vet, race tests in random order (14 min cap, a line per package as it ends), the simnet smoke run, every benchmark once
	$(GO) vet $(PKGS)
	GO=$(GO) PKGS='$(PKGS)' TEST_TIMEOUT=$(TEST_TIMEOUT) scripts/gotest.sh
	@# Memory figures mean nothing under the race detector (its shadow
	@# memory), so the tests that measure RSS run once more without it.
	$(GO) test -count=1 -run '^TestMemoryOfHundredStores$$' ./store
	$(MAKE) --no-print-directory simnet-smoke
	$(GO) test -run='^$$' -bench=. -benchtime=1x -timeout $(TEST_TIMEOUT) $(PKGS)

race: ## race-enabled tests, uncached
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

bench: ## full benchmarks, BENCHCOUNT runs each; raw output for benchstat in bin/bench.txt
	@mkdir -p $(BIN)
	set -o pipefail; $(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) -timeout 60m $(PKGS) | tee $(BIN)/bench.txt
	@echo "raw results in $(BIN)/bench.txt (compare two runs with: benchstat old.txt new.txt)"

# fuzz finds the packages whose tests declare `func Fuzz...`, asks `go test
# -list` for the target names, and runs each target for FUZZTIME. go test
# -fuzz takes one target per invocation, so they run one after another.
fuzz: ## run every fuzz target for FUZZTIME (default 10s) each; report every failure at the end
	@n=0; failed=""; \
	for dir in $$($(GO) list -f '{{.Dir}}' $(PKGS)); do \
		grep -qs '^func Fuzz' $$dir/*_test.go || continue; \
		for target in $$(cd $$dir && $(GO) test -list '^Fuzz' . | grep '^Fuzz'); do \
			echo "== $$target ($$dir, $(FUZZTIME))"; \
			n=$$((n+1)); \
			(cd $$dir && $(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) .) || \
				failed="$$failed $${dir#$(CURDIR)/}:$$target"; \
		done; \
	done; \
	echo "fuzz: $$n targets ran for $(FUZZTIME) each"; \
	if [ -n "$$failed" ]; then \
		echo "fuzz: FAILED:$$failed"; \
		echo "fuzz: each failing input is in <package>/testdata/fuzz/<target>/; keep it there as a regression seed"; \
		exit 1; \
	fi

lint: ## gofmt, go vet, staticcheck (installed at a pinned version; skipped if it cannot be installed)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')); \
	if [ -n "$$out" ]; then echo "gofmt: these files need formatting:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@if [ ! -x $(TOOLS)/staticcheck-$(STATICCHECK_VERSION) ]; then \
		mkdir -p $(TOOLS); \
		if GOBIN=$(CURDIR)/$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); then \
			mv $(TOOLS)/staticcheck $(TOOLS)/staticcheck-$(STATICCHECK_VERSION); \
		else \
			echo "lint: staticcheck $(STATICCHECK_VERSION) could not be installed from the module proxy; skipped"; \
		fi; \
	fi; \
	if [ -x $(TOOLS)/staticcheck-$(STATICCHECK_VERSION) ]; then \
		echo "$(TOOLS)/staticcheck-$(STATICCHECK_VERSION) $(PKGS)"; \
		$(TOOLS)/staticcheck-$(STATICCHECK_VERSION) $(PKGS); \
	fi

golangci-lint: ## golangci-lint at a pinned version, default linters (not part of lint or test)
	@if [ ! -x $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION) ]; then \
		mkdir -p $(TOOLS); \
		GOBIN=$(CURDIR)/$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) && \
		mv $(TOOLS)/golangci-lint $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION); \
	fi
	$(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION) run --max-issues-per-linter=0 --max-same-issues=0 $(PKGS)

tidy: ## fail if `go mod tidy` would change go.mod or go.sum (changes nothing)
	@$(GO) mod tidy -diff || { echo "tidy: go.mod/go.sum are not tidy; run 'go mod tidy' and commit the result"; exit 1; }

# simnet-smoke runs the simnet scenarios in virtual time without -race (under
# -race they are skipped: the synctest bubble runs on one P and they take
# minutes; TestSmokeRace covers the harness there). TestSmoke is the 20-node,
# 20-second churn run with looser thresholds than the 100-node target.
# console-screenshots drives the console (/ui) in headless Chromium against
# two daemons with real agents, as make test does, and saves each page.
console-screenshots: ## regenerate docs/console/*.png: the operator console's pages in headless Chromium
	@mkdir -p docs/console
	AGENTD_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run '^TestConsoleInBrowser$$' ./daemon

simnet-smoke: ## simnet scenarios in virtual time: 20-node smoke, partition, mass join, repeatability (~1 min)
	$(GO) test -count=1 -timeout 10m ./simnet

# simnet is the headline run of docs/simnet.md: 100 nodes, default churn,
# 2 minutes, in real time; exit 1 when recall < 99 % or stale rate > 1 %.
# SIMNET_ARGS adds flags, e.g. SIMNET_ARGS='--scenario partition'.
SIMNET_ARGS ?=
# simnet-curve runs simnet at CURVE_SIZES with the same interest per node
# (the catalog grows with the network: 0.6 capabilities and 0.4 skills per
# node, drawn uniformly; each node asks for 3 capabilities of its own; 0.2
# queries per node per second) and writes the table into docs/simnet.md and
# the plot into docs/simnet-curve.svg. A size that fails its thresholds
# still gets its row (marked FAIL).
CURVE_SIZES ?= 100 250 500 1000
CURVE_DURATION ?= 2m
simnet-curve: build ## simnet at 100, 250, 500 and 1000 nodes with the same interest per node: table in docs/simnet.md, plot in docs/simnet-curve.svg (long)
	for n in $(CURVE_SIZES); do \
	  $(BIN)/agentd simnet --quiet --nodes $$n --duration $(CURVE_DURATION) --uniform --capabilities $$((n*6/10)) --skills $$((n*4/10)) \
	    --query-interest 3 --query-rate $$((n/5)) --json $(BIN)/curve-$$n.json $(SIMNET_ARGS) > $(BIN)/curve-$$n.txt; \
	  echo "$$n nodes: exit $$? ($(BIN)/curve-$$n.txt)"; \
	done
	$(BIN)/agentd simnet curve --md docs/simnet.md --svg docs/simnet-curve.svg $(foreach n,$(CURVE_SIZES),$(BIN)/curve-$(n).json)

simnet: build ## 100 nodes under churn for 2 minutes (report in bin/simnet.{txt,json,svg}); SIMNET_ARGS for more flags
	set -o pipefail; $(BIN)/agentd simnet --nodes 100 --duration 2m --json $(BIN)/simnet.json --svg $(BIN)/simnet.svg $(SIMNET_ARGS) | tee $(BIN)/simnet.txt

BOOTSTRAP_PEERS ?= 250 500 1000
# bench-scale needs python3 and Debian's etcd-server (apt-get install
# etcd-server); SCALE_N lists the record counts, SCALE_IDLE the seconds of
# each idle measurement. 100 000 records take about 15 minutes.
SCALE_N    ?= 10000,100000
SCALE_IDLE ?= 60
bench-scale: build ## agentd next to etcd at SCALE_N records: register, lookup, search, memory, restart, idle CPU (docs/performance.md)
	python3 scripts/bench-scale.py --n $(SCALE_N) --idle $(SCALE_IDLE)

bootstrap-load: ## measure a bootstrap node's RSS, goroutines and idle CPU at BOOTSTRAP_PEERS relayed peers (docs/bootstrap.md)
	@for n in $(BOOTSTRAP_PEERS); do \
		AGENTD_BOOTSTRAP_PEERS=$$n $(GO) test -count=1 -run '^TestBootstrapLoad$$' -v -timeout 20m ./internal/e2e | grep -E 'FIGURES|reserved in|FAIL' || exit 1; \
	done

clean: ## remove bin/ (the binary, linters, benchmark output)
	rm -rf $(BIN)
