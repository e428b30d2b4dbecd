# Glint's image: the static binary `glint` and, beside it, `glint-executor`
# (`glint executor` alone: two-thirds of glint's size, so each executor
# starts sooner), on distroless/static, running as the distroless "nonroot" user
# (65532). Every Glint process runs from glint — master, worker, submit — and
# so do cluster-mode drivers, which a worker starts as child processes
# (`glint driver …`) inside its own container, in its work dir /work; the
# executors it starts run glint-executor.
#
#   docker build -t ghcr.io/glint-cluster/glint:0.1.0-dev .
#   docker run --rm -p 7077:7077 ghcr.io/glint-cluster/glint:0.1.0-dev master
#
# The image has no shell and no curl: container healthchecks run
# `glint health http://localhost:7077/healthz`.
#
# deploy's tests (deploy/*_test.go) check this file against docker-compose.yml and
# deploy/k8s (image, ports, user, work dir) and build glint the same way; make
# compose-test builds it on local stand-ins for its base images.
#
# No syntax directive: the features used (RUN --mount=type=cache, FROM
# --platform) are in the Dockerfile frontend that every BuildKit since Docker
# 20.10 has built in, so a build needs no frontend image from a registry.

# The base images, as parameters (docker-compose.yml passes .env's
# GLINT_GO_IMAGE and GLINT_BASE_IMAGE): the Go toolchain of the build stage,
# and the runtime base, distroless/static's nonroot variant (a CA bundle,
# /etc/passwd with the user nonroot, 65532, and its home /home/nonroot, /tmp).
ARG GO_IMAGE=golang:1.26.8
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639

# Build on the builder's own platform and cross-compile: CGO is off, so the
# result is static and runs on distroless/static for any TARGETARCH.
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/ ./cmd/glint ./cmd/glint-executor
# etcd, for masters in --recovery-mode etcd (compose's ha profile, deploy/k8s/ha):
# built from the etcd server module Glint's tests embed, at go.mod's version.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/etcd go.etcd.io/etcd/server/v3
# The worker's work dir, owned by the runtime user (distroless/static has no
# mkdir to make it later).
RUN mkdir -p /out/work

# The etcd image (target etcd): the same base, etcd's data in the user's home.
FROM ${BASE_IMAGE} AS etcd
COPY --from=build /out/etcd /usr/local/bin/etcd
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 2379
ENTRYPOINT ["etcd"]

# Glint's image (the default target).
FROM ${BASE_IMAGE}
COPY --from=build /out/glint /usr/local/bin/glint
COPY --from=build /out/glint-executor /usr/local/bin/glint-executor
COPY --from=build --chown=65532:65532 /out/work /work
USER 65532:65532
WORKDIR /work
# 7077: master (Connect, /json, /metrics, /sd, /healthz); 7078: worker.
# Executors and drivers listen on ephemeral ports of the worker's host.
EXPOSE 7077 7078
ENTRYPOINT ["glint"]
CMD ["--help"]
