# strata — see README.md. Every target works on a fresh machine: Go comes
# from /usr/local/go, modules from the Go module proxy, PostgreSQL from the
# local server binaries (started by strata itself or by the tests).
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin/strata

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_\/-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/strata
	$(GO) build -o $(BIN) ./cmd/strata

.PHONY: run
run: build ## run strata serve on a private PostgreSQL (or $$DATABASE_URL) and print a token and a curl line
	./$(BIN) serve

# PgBouncer: the tests of the command and query roles behind a
# transaction-mode pooler (docs/pgbouncer.md) start their own from the
# Debian package's binary. Installed here when missing, as root (CI is);
# otherwise the target says what to run.
PGBOUNCER ?= $(shell command -v pgbouncer 2>/dev/null || ls /usr/sbin/pgbouncer 2>/dev/null)

CHROMIUM ?= $(shell ls /usr/bin/chromium 2>/dev/null)

# Patroni and etcd: the FAILOVER scenario of make chaos (docs/chaos.md) runs a
# three-member Patroni cluster of the local PostgreSQL 15 over a private etcd.
PATRONI ?= $(shell command -v patroni 2>/dev/null || ls /usr/bin/patroni 2>/dev/null)
ETCD ?= $(shell command -v etcd 2>/dev/null || ls /usr/bin/etcd 2>/dev/null)

.PHONY: deps
deps: ## install what the tests need beyond Go and PostgreSQL (Debian's pgbouncer, chromium, patroni and etcd, Ory Hydra, SeaweedFS, local-kms) when it is missing
	@$(MAKE) --no-print-directory deps/pgbouncer deps/chromium deps/patroni deps/hydra deps/seaweedfs deps/localkms

# SeaweedFS: the S3-compatible object store of the archive tests
# (cli/tenants_archive_test.go), built from the Go module proxy into
# bin/weed by internal/seaweed/build.sh, which pins its version. The tests
# build it themselves when it is missing; this does it up front.
.PHONY: deps/seaweedfs
deps/seaweedfs:
	@if [ -x bin/weed ]; then exit 0; fi; \
	echo "make deps: building SeaweedFS into bin/weed (several minutes the first time)"; \
	sh internal/seaweed/build.sh bin/weed

# Ory Hydra: the OpenID Connect provider of the identity tests
# (cli/serve_identity_test.go), built from the module proxy into bin/hydra
# from internal/hydra/tool, a module of its own that pins its version. The
# tests build it themselves when it is missing; this does it up front.
.PHONY: deps/hydra
deps/hydra:
	@if [ -x bin/hydra ]; then exit 0; fi; \
	echo "make deps: building Ory Hydra into bin/hydra (a few minutes the first time)"; \
	mkdir -p bin && cd internal/hydra/tool && GOWORK=off $(GO) build -o ../../../bin/hydra github.com/ory/hydra/v2

# local-kms: an implementation of the AWS KMS API, the KMS of the tests of
# the key-encryption key held in AWS KMS (personal/awskms), built from the
# module proxy into bin/local-kms from internal/localkms/tool, a module of
# its own that pins its version. The tests build it themselves when it is
# missing; this does it up front.
.PHONY: deps/localkms
deps/localkms:
	@if [ -x bin/local-kms ]; then exit 0; fi; \
	echo "make deps: building local-kms into bin/local-kms"; \
	mkdir -p bin && cd internal/localkms/tool && GOWORK=off GOFLAGS=-mod=mod $(GO) build -o ../../../bin/local-kms github.com/nsmithuk/local-kms

.PHONY: deps/pgbouncer
deps/pgbouncer:
	@if [ -n "$(PGBOUNCER)" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "make deps: pgbouncer is not installed and this is not root: run 'sudo apt-get install -y pgbouncer' (Debian/Ubuntu), or set PGBOUNCER=/path/to/pgbouncer"; exit 1; \
	fi; \
	command -v apt-get >/dev/null || { echo "make deps: pgbouncer is not installed and there is no apt-get: install PgBouncer >= 1.18 and set PGBOUNCER=/path/to/pgbouncer"; exit 1; }; \
	echo "make deps: installing pgbouncer (apt-get)"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer >/dev/null 2>&1 || \
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer; } || \
		{ echo "make deps: apt-get install pgbouncer failed"; exit 1; }; \
	pgbouncer --version | head -n 1

# Chromium: the console's browser tests (cmd/strata/console_test.go) drive
# Debian's headless chromium through chromedp. Installed the same way.
.PHONY: deps/chromium
deps/chromium:
	@if [ -n "$(CHROMIUM)" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "make deps: chromium is not installed and this is not root: run 'sudo apt-get install -y chromium' (Debian/Ubuntu)"; exit 1; \
	fi; \
	command -v apt-get >/dev/null || { echo "make deps: chromium is not installed and there is no apt-get: install Chromium as /usr/bin/chromium"; exit 1; }; \
	echo "make deps: installing chromium (apt-get)"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || \
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; } || \
		{ echo "make deps: apt-get install chromium failed"; exit 1; }; \
	/usr/bin/chromium --version | head -n 1

# Patroni and etcd: the chaos harness's FAILOVER scenario (cmd/chaos/harness,
# scenario_failover.go) starts its own etcd and three Patroni members from
# the Debian packages. Installed the same way.
.PHONY: deps/patroni
deps/patroni:
	@if [ -n "$(PATRONI)" ] && [ -n "$(ETCD)" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "make deps: patroni or etcd is not installed and this is not root: run 'sudo apt-get install -y patroni etcd-server' (Debian/Ubuntu)"; exit 1; \
	fi; \
	command -v apt-get >/dev/null || { echo "make deps: patroni or etcd is not installed and there is no apt-get: install Patroni >= 3 and etcd >= 3.4 on the PATH"; exit 1; }; \
	echo "make deps: installing patroni and etcd-server (apt-get)"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends patroni etcd-server >/dev/null 2>&1 || \
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends patroni etcd-server; } || \
		{ echo "make deps: apt-get install patroni etcd-server failed"; exit 1; }; \
	patroni --version | head -n 1; etcd --version | head -n 1

.PHONY: test
test: deps ## run every test against real PostgreSQL (started by the tests unless $$TEST_DATABASE_URL is set), then every fuzz target briefly
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	@$(MAKE) --no-print-directory apidiff
	@$(MAKE) --no-print-directory test/own-module
	@$(GO) test -count=1 -run '^TestConformance$$' -v ./eventstore/esdb 2>&1 | grep -E '^(EventStoreDB|--- FAIL)' || true
	@$(MAKE) --no-print-directory fuzz FUZZTIME=5000x

FUZZ_TARGETS := \
	./httpapi:FuzzDecodeStrict ./httpapi:FuzzDecodeJSON \
	./examples/orders/ordercmd:FuzzCreateOrderRequest ./examples/orders/ordercmd:FuzzAddLineRequest \
	./examples/orders/ordercmd:FuzzPayRequest ./examples/orders/ordercmd:FuzzCancelRequest \
	./examples/orders/ordercmd:FuzzEmptyRequest ./commands/commandapi:FuzzParseIfMatch \
	./commands/commandapi:FuzzIdempotencyKey ./examples/orders/ordercmd:FuzzCommandRoutes \
	./auth:FuzzParse ./auth:FuzzParseSigned ./auth:FuzzParseProviderSigned ./auth:FuzzParseKeySet \
	./domain/event:FuzzParseToken ./domain/event:FuzzTokenRoundTrip ./domain/event:FuzzDecodeMetadata ./domain/event:FuzzParsePlacedToken
FUZZTIME ?= 60s

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 60s) one after the other; a crasher is saved under the package's testdata/fuzz
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; log=$$(mktemp); \
		echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=10s -parallel=2 $$pkg >$$log 2>&1; rc=$$?; \
		if [ $$rc -ne 0 ] && { grep -q 'Failing input written' $$log || ! grep -qx '    context deadline exceeded' $$log; }; then \
			cat $$log; rm -f $$log; exit 1; \
		fi; \
		grep 'fuzz: elapsed' $$log | tail -n 1; \
		[ $$rc -eq 0 ] || echo "  stopped by the Go 1.26 fuzz coordinator's deadline race (golang/go#75804), not by a crash"; \
		rm -f $$log; \
	done

# apidiff (issue 34 §6): every change to the exported API of the module's
# public packages against the previous commit of main (on a branch: its
# merge base with main; APIDIFF_BASE=rev to choose, APIDIFF_HEAD=rev for a
# commit instead of the working tree), per package, incompatible first, and
# a reminder when there is a break and CHANGELOG.md did not change. It
# informs and never fails: a single-commit or shallow clone, or no network
# with nothing cached, is said and skipped. golang.org/x/exp's apidiff is
# installed from the Go module proxy at the pinned version below
# (internal/apidiff reads the base's API out of git and drives it).
APIDIFF_VERSION := v0.0.0-20261120182113-8801fbdfac81
APIDIFF_BIN ?= bin/tools/apidiff-$(APIDIFF_VERSION)/apidiff
APIDIFF_BASE ?=
APIDIFF_HEAD ?=

.PHONY: apidiff
apidiff: ## list the changes to the exported API against the previous commit of main (APIDIFF_BASE=rev); never fails on them
	@if [ ! -x "$(APIDIFF_BIN)" ]; then \
		out=$$(GOBIN="$(abspath $(dir $(APIDIFF_BIN)))" $(GO) install golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION) 2>&1) || \
		{ echo "apidiff: not compared: cannot install golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION) (offline, and not in the module cache?):"; \
		  echo "$$out" | tail -n 3; exit 0; }; \
	fi; \
	$(GO) run ./internal/apidiff -apidiff "$(APIDIFF_BIN)" -base "$(APIDIFF_BASE)" -head "$(APIDIFF_HEAD)"

# examples/loyalty is a module in a Go module of its own, written against
# strata's public API only, as a team writes its own (docs/extending.md):
# built, vetted and tested from its own directory, with its own go.mod.
.PHONY: test/own-module
test/own-module: ## build, vet and test examples/loyalty from its own Go module (the public API, no internal/)
	@if grep -rn --include='*.go' '"github.com/strata-es/strata/\(.*/\)\?internal' examples/loyalty; then \
		echo "examples/loyalty imports strata's internal/: a module in its own Go module cannot"; exit 1; fi
	cd examples/loyalty && $(GO) vet ./... && $(GO) build -o /dev/null ./cmd/loyalty && $(GO) test -count=1 ./...

# An OpenAPI validator independent of the tests' kin-openapi: Stoplight Prism
# (npm, pinned in cli/prism_test.go, installed into .tools/prism by the test)
# proxies traffic over every operation to a real serve and reports each
# disagreement of a request or an answer with the merged document.
.PHONY: openapi/prism
openapi/prism: ## run Stoplight Prism (from npm) over live traffic against the OpenAPI document
	$(GO) test -tags prism -count=1 -v -run '^TestIndependentValidator$$' ./cli/ 2>&1 | grep -Ev '^(=== |    pgtest)'

.PHONY: test/race
test/race: deps ## the tests under the race detector
	$(GO) test -race -count=1 -timeout 30m ./...

.PHONY: bench
bench: build deps ## measure every hot path against raw PostgreSQL in the same run (~15 min); writes bench-results/
	./$(BIN) bench --out bench-results/bench.json --docs docs/bench

.PHONY: bench-quick
bench-quick: build deps ## a one-minute smoke run of the benchmarks
	./$(BIN) bench --quick --out bench-results/bench-quick.json

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: db/reset
db/reset: build ## stop the embedded PostgreSQL of make run and delete its data ($$STRATA_DATA_DIR, default ./.strata, and the cluster wherever strata put it)
	./$(BIN) db reset

.PHONY: clean
clean: ## remove build output
	rm -rf bin

CHAOS_FLAGS ?=

.PHONY: chaos
chaos: build ## the fault harness (docs/chaos.md): R1 R2 R5 R11 R12 R14 R15 STARVE PM1 ERASE MOVE RESTORE HOSTILE FAILOVER and a 3-minute soak (R18) against bin/strata, result table, non-zero exit on a failure (~13 min)
	$(GO) build -o bin/chaos ./cmd/chaos
	./bin/chaos --strata $(BIN) $(CHAOS_FLAGS)

SOAK ?= 30m

.PHONY: soak
soak: build ## the soak (docs/chaos.md R18): SOAK (default 30m) at 30 % of the measured maximum, a fault every SOAK/15; writes docs/soak/soak.png and latest.md
	$(GO) build -o bin/chaos ./cmd/chaos
	./bin/chaos --strata $(BIN) --scenarios R18 --soak $(SOAK) --docs docs/soak $(CHAOS_FLAGS)

.PHONY: chaos-broken
chaos-broken: ## R1 against a deliberately broken strata (build tag chaos_broken); succeeds only if the checker catches it
	$(GO) build -tags chaos_broken -o bin/strata-broken ./cmd/strata
	$(GO) build -o bin/chaos ./cmd/chaos
	@./bin/chaos --strata bin/strata-broken --scenarios R1 --discard $(CHAOS_FLAGS); rc=$$?; \
	if [ $$rc -eq 1 ]; then echo "chaos-broken: OK, the checker caught the broken build (exit 1 expected)"; \
	elif [ $$rc -eq 0 ]; then echo "chaos-broken: the checker PASSED a broken build"; exit 1; \
	else echo "chaos-broken: the harness itself failed (exit $$rc)"; exit $$rc; fi
