// Command image builds mcsd's container image from Go alone, with no
// container daemon and nothing pulled: a static binary per platform
// (linux/amd64, linux/arm64) on an empty base, run as user and group 65532,
// no shell, no package manager, the standard OCI labels, in one OCI image
// index. The same commit gives the same digest: every time in the image is
// the commit's, and the layers are written in a fixed order.
//
//	go run ./hack/image build [-out _output] [-tag mcsd:dev]   # make image
//	go run ./hack/image push -image REGISTRY/NAME:TAG           # make image-push
//
// build writes the OCI layout (_output/image/), an OCI archive of it
// (_output/mcsd-image.oci.tar, for `ctr images import` and recent
// `docker load`) and, for the host's platform, a Docker archive tagged -tag
// (_output/mcsd-image-ARCH.docker.tar, for `docker load` and `kind load
// image-archive`). push pushes the index in the layout to a registry with
// the credentials of the Docker config (~/.docker/config.json).
//
// CA certificates: the binary carries Go's fallback roots
// (golang.org/x/crypto/x509roots/fallback, imported by cmd/mcsd), which
// Go's TLS uses when the image has no certificate files, as here.
package main
