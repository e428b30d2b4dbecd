# Glint's build. Every tool comes from tools/go.mod through `go tool`; nothing
# needs installing globally.

GO        ?= go
TOOL      := $(GO) tool -modfile=tools/go.mod
JAEGER    := $(GO) tool -modfile=tools/jaeger/go.mod
GOFILES    = $(shell git ls-files '*.go')

.PHONY: all build tools chromium generate check-generate dashboards lint test test-short bench soak fuzz image up down

all: build

build:
	$(GO) build ./...

## tools: build the test tools once (Go caches them): buf, promtool and Prometheus from
## tools/go.mod, and Jaeger from its own module (tools/jaeger/go.mod), which cannot
## share a module with Prometheus or with Glint's OpenTelemetry versions.
tools:
	$(TOOL) -n buf > /dev/null
	$(TOOL) -n promtool > /dev/null
	$(TOOL) -n prometheus > /dev/null
	$(JAEGER) -n jaeger > /dev/null

## generate: regenerate the Connect and protobuf code under pkg/api from proto/.
generate:
	$(TOOL) buf generate

## check-generate: fail if the committed generated code differs from what generate makes.
check-generate:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(TOOL) buf generate -o $$tmp && \
	diff -r pkg/api $$tmp/pkg/api && echo "generated code is up to date"

## dashboards: regenerate dashboards/*.json from their Go builders (a test checks they match).
dashboards:
	$(GO) run ./dashboards/generate -dir dashboards

## image, up, down: the container image and the docker-compose stack (needs Docker).
## up makes the cluster token deploy/cluster.token once (32 random bytes, like
## `glint token`; git ignores it) and gives it to compose as GLINT_CLUSTER_TOKEN.
CLUSTER_TOKEN := deploy/cluster.token
image:
	docker build -t ghcr.io/glint-cluster/glint:0.1.0-dev .
$(CLUSTER_TOKEN):
	@umask 077 && token=$$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n') && \
	printf '%s\n' "$$token" > $@ && echo "made the cluster token $@ (glint ... --token-file $@)"
up: $(CLUSTER_TOKEN)
	GLINT_CLUSTER_TOKEN="$$(cat $(CLUSTER_TOKEN))" docker compose --profile demo up -d --build
down:
	docker compose --profile demo down

## compose-test: docker-compose.yml for real (deploy/compose_docker_test.go): the compose CLI
## (built from tools/compose) on a Docker engine — the one that answers, or a dockerd it
## starts and stops —, every image built here (deploy/images), the stack checked from the
## host, then taken down (also when interrupted; a run cleans what a killed one left).
## Grafana and Pyroscope (AGPL) are not run. Caches in ~/.cache/glint/compose-test.
.PHONY: compose-test docker
compose-test: docker
	GLINT_COMPOSE_TEST=1 $(GO) test -count=1 -timeout 60m -run '^TestComposeStackInDocker$$' -v ./deploy/

## docker: a Docker engine (or dockerd to start) and a static busybox for the local images;
## when missing and make runs as root, Debian's docker.io and busybox-static are installed.
docker:
	@{ docker info > /dev/null 2>&1 || command -v dockerd > /dev/null; } && command -v busybox > /dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
			apt-get install -y docker.io busybox-static || { apt-get update && apt-get install -y docker.io busybox-static; }; \
		else echo "make compose-test needs Docker and a static busybox: sudo apt-get install -y docker.io busybox-static"; exit 1; fi; }

## lint: gofmt, go vet (the examples module too) and buf lint.
lint:
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd examples && $(GO) vet ./...
	$(TOOL) buf lint proto

## chromium: the web UI tests drive a headless Chromium (Debian's package); when it is
## missing and make runs as root, it is installed with apt-get.
chromium:
	@command -v chromium > /dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
			apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; \
		else echo "the web UI tests need Chromium: sudo apt-get install -y chromium"; exit 1; fi; }

## test: everything — lint, generated code, every test on real processes and sockets,
## make bench's harness once in its quick mode (proof that it works, no numbers judged),
## and the chaos soak for a minute in each mode (its summary tables; when it fails, its
## progress log's end and then the tables, so the verdict is the last thing printed).
test: tools chromium lint check-generate
	$(GO) test -count=1 -race -timeout 12m ./...
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && $(GO) run ./cmd/glint-bench -quick -out $$tmp/results.json > /dev/null 2>$$tmp/log || { cat $$tmp/log; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && SOAK_MINUTES=1 SOAK_MODE=both $(GO) run ./cmd/glint-soak > $$tmp/out 2>$$tmp/log || { tail -n 60 $$tmp/log; cat $$tmp/out; exit 1; }; cat $$tmp/out

## test-short: the fast loop.
test-short:
	$(GO) test -short ./...

## fuzz: run each fuzz target for FUZZTIME (plain go test, and so make test, runs
## their seed corpora). Inputs that fail are written under the package's testdata/fuzz.
FUZZTIME ?= 30s
FUZZ_TARGETS = \
	FuzzMasterHandlers:./services/master \
	FuzzWorkerHandlers:./services/worker \
	FuzzDriverHandlers:./services/driver \
	FuzzDriverHandlersAsTheMaster:./services/driver \
	FuzzExecutorHandlers:./services/executor \
	FuzzParseSize:./pkg/resources \
	FuzzCheckCommand:./pkg/resources \
	FuzzValidate:./pkg/ids \
	FuzzSubstitute:./pkg/child
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t%%:*} ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) $${t#*:}; \
	done

## soak: the chaos soak (cmd/glint-soak): a real cluster in each mode — one master on a
## recovery file, or three on a three-member etcd — with three workers, under seeded
## kills and pauses, while applications with known answers run; SOAK_MINUTES per mode
## (10), SOAK_SEED to repeat a run (printed), SOAK_MODE=file|ha|both, SOAK_KEEP=1 keeps
## its files. Exits 1 on any violation or failure that was not the job's own.
soak:
	$(GO) run ./cmd/glint-soak

## bench: the table of BENCHMARKS.md (cmd/glint-bench runs the TestBench* row tests, writes
## bench/results.json and the table into BENCHMARKS.md), then the Go micro-benchmarks.
bench: tools
	$(GO) run ./cmd/glint-bench -out bench/results.json -doc BENCHMARKS.md
	$(GO) test -run '^$$' -bench . -benchmem ./...
