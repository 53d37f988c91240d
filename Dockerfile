# syntax=docker/dockerfile:1
# mcsd's image: one static binary on distroless static, run as a non-root
# user (65532). Build it from the repository root:
#
#   docker build -t mcsd:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/mcsd:TAG --push .
#
# The build stage runs `make image-binary` (CGO_ENABLED=0, -trimpath,
# -ldflags "-s -w"); the image holds nothing else.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make image-binary ${TARGETARCH:+IMAGE_GOARCH=$TARGETARCH} \
    && cp bin/linux-*/mcsd /mcsd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /mcsd /mcsd
USER 65532:65532
ENTRYPOINT ["/mcsd"]
