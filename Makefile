# mcsd — multi-cluster service discovery for Kubernetes.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO ?= go
CACHE := $(CURDIR)/.cache
TOOLS := $(CACHE)/tools
N ?= 3

CONTROLLER_GEN_VERSION := v0.20.1
GOLANGCI_LINT_VERSION := v2.15.0
HELM_VERSION := v3.22.0
CONTROLLER_GEN := $(TOOLS)/controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen
GOLANGCI_LINT := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint
HELM := $(TOOLS)/helm-$(HELM_VERSION)/helm

# Test timeouts: the first run also builds the testbed binaries (minutes).
TEST_TIMEOUT ?= 45m
# How much make test fuzzes the registry's decode and merge path: a count of
# inputs (about 15 s here), not a duration, whose end Go 1.26's fuzzer can
# report as a failure, "context deadline exceeded", on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27).
FUZZ_TIME ?= 10000x


##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build the mcsd binary into bin/.
	$(GO) build -o bin/mcsd ./cmd/mcsd

.PHONY: image
image: ## Build mcsd's image (linux/amd64 and linux/arm64, no Docker needed): _output/image (OCI layout), _output/mcsd-image.oci.tar, _output/mcsd-image-<arch>.docker.tar (mcsd:dev).
	$(GO) run ./hack/image build -out _output -tag mcsd:dev

.PHONY: image-push
image-push: ## Push the image that make image built: make image-push IMAGE=registry.example/mcsd:v0.1.0 (credentials from ~/.docker/config.json).
	@test -n "$(IMAGE)" || { echo "IMAGE is required: make image-push IMAGE=registry.example/mcsd:TAG"; exit 1; }
	$(GO) run ./hack/image push -out _output -image $(IMAGE)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for api/.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs into config/crd/bases (ClusterProperty from api/; the MCS CRDs from the mcs-api module, with printer columns: hack/mcscrds).
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(GO) run ./hack/mcscrds config/crd/bases
	cp config/crd/bases/*.yaml charts/mcsd/files/crds/

.PHONY: verify
verify: generate manifests ## Fail if generated files are out of date.
	@git diff --exit-code -- api config/crd || { echo "generated files are out of date: run 'make generate manifests' and commit"; exit 1; }
	@git diff --exit-code -- charts/mcsd/files/crds || { echo "charts/mcsd/files/crds differs from config/crd/bases: run 'make manifests' and commit"; exit 1; }

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet.
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: helm
helm: $(HELM) ## Build the pinned helm into .cache/tools and print its path.
	@echo $(HELM)

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint the Helm chart charts/mcsd, with an etcd and with a Cloud Map registry.
	$(HELM) lint --strict charts/mcsd
	$(HELM) lint --strict charts/mcsd --set registry.type=cloudmap --set registry.cloudmap.region=eu-west-1

.PHONY: manifests-render
manifests-render: $(HELM) ## Render the install manifests (config/default, config/overlays/*, the Helm chart) into _output/manifests.
	@mkdir -p _output/manifests
	$(GO) run ./hack/kustomize config/default > _output/manifests/default.yaml
	$(GO) run ./hack/kustomize config/overlays/etcd > _output/manifests/etcd.yaml
	$(GO) run ./hack/kustomize config/overlays/etcd-password > _output/manifests/etcd-password.yaml
	$(GO) run ./hack/kustomize config/overlays/cloudmap > _output/manifests/cloudmap.yaml
	$(HELM) template mcsd charts/mcsd --namespace mcsd-system > _output/manifests/helm-etcd.yaml
	$(HELM) template mcsd charts/mcsd --namespace mcsd-system --set registry.etcd.auth.secretName=mcsd-registry-etcd-auth --set registry.etcd.tls.clientCertificate=false > _output/manifests/helm-etcd-password.yaml
	$(HELM) template mcsd charts/mcsd --namespace mcsd-system --set registry.type=cloudmap --set registry.cloudmap.region=eu-west-1 > _output/manifests/helm-cloudmap.yaml

##@ Testbed

.PHONY: testbed-binaries
testbed-binaries: ## Build the pinned testbed binaries (Kubernetes, kube-proxy, agnhost, etcd, kwok, CoreDNS) into .cache/testbed; install the data plane's system tools.
	@hack/build-testbed.sh >/dev/null
	@hack/ensure-host-tools.sh

.PHONY: testbed-up
testbed-up: ## Start N local clusters (default N=3) and print the kubeconfig path; TESTBED_ARGS=-no-dataplane for control planes alone.
	@$(GO) run ./test/testbed/cmd/testbed up -n $(N) $(TESTBED_ARGS)

.PHONY: testbed-down
testbed-down: ## Stop the testbed's processes and remove its state.
	@$(GO) run ./test/testbed/cmd/testbed down

##@ Test

.PHONY: test
test: testbed-binaries ## Run every test: unit, registry backends, and end-to-end on real clusters.
	@gofmt_out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$gofmt_out" ]; then echo "gofmt needed:"; echo "$$gofmt_out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeMerge$$' -fuzztime=$(FUZZ_TIME) -parallel=1 ./pkg/registry/etcd

.PHONY: test-unit
test-unit: ## Run the tests that need no testbed.
	$(GO) test -count=1 -short ./...

$(CONTROLLER_GEN):
	GOBIN=$(dir $@) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(HELM):
	GOBIN=$(dir $@) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

##@ Demo

.PHONY: demo
demo: ## Start a local clusterset (2 clusters, registry, mcsd), deploy a sample app in both, export it from both, resolve and curl it from a pod in c2.
	@hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop the demo and remove its state (its logs stay in .cache/demo/logs until the next make demo).
	@hack/demo.sh down

##@ Benchmark

# make bench's parameters; override on the command line, e.g.
# make bench SERVICES=2000 BENCH_ARGS="-phases coldstart,steady,restart"
BENCH_REGISTRY ?= etcd
CLUSTERS ?= 3
SERVICES ?= 1000
ENDPOINTS ?= 10
CHURN ?= 5/s
BENCH_ARGS ?=
BENCH_OUT ?= results/$(shell date +%Y%m%d-%H%M%S)

.PHONY: bench
bench: testbed-binaries ## Benchmark propagation latency, scale and cost on the testbed; report into results/<timestamp> (see docs/performance.md).
	$(GO) run ./test/bench -registry $(BENCH_REGISTRY) -clusters $(CLUSTERS) -services $(SERVICES) -endpoints $(ENDPOINTS) -churn $(CHURN) -out $(BENCH_OUT) $(BENCH_ARGS)

# bench-scale's parameters: make bench-scale SCALE_N=3,10,30,100,250 SCALE_SERVICES=5000
# SCALE_REAL=0 leaves out the real clusters (the registry alone);
# SCALE_REAL_NAMESPACES is how many of the 50 namespaces they have and import.
SCALE_N ?= 3,10,30,100
SCALE_SERVICES ?= 5000
SCALE_K ?= 3
SCALE_REAL ?= 2
SCALE_REAL_NAMESPACES ?= 4
SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: testbed-binaries ## The etcd registry under many clusters, simulated as members in one process, with real clusters running mcsd among them: cold start, join, churn, idle cost, registry restart, a member leaving, for each N (see docs/performance.md).
	$(GO) run ./test/bench/scale -n $(SCALE_N) -services $(SCALE_SERVICES) -k $(SCALE_K) -endpoints $(ENDPOINTS) -real $(SCALE_REAL) -real-namespaces $(SCALE_REAL_NAMESPACES) -out $(BENCH_OUT)-scale $(SCALE_ARGS)

# bench-cloudmap's size: make bench-cloudmap CLOUDMAP_SERVICES=500. Its sweep
# runs every minute, so that the steady phase measures sweeps too; the report
# amortizes them over the backend's default interval (15 min).
CLOUDMAP_SERVICES ?= 50

.PHONY: bench-cloudmap
bench-cloudmap: testbed-binaries ## The benchmark through the Cloud Map backend on moto, at a smaller size (CLOUDMAP_SERVICES, default 50).
	$(GO) run ./test/bench -registry cloudmap -clusters 2 -services $(CLOUDMAP_SERVICES) -endpoints $(ENDPOINTS) -churn 2/s -cloudmap-sweep 1m -out $(BENCH_OUT)-cloudmap $(BENCH_ARGS)
