# capi-autoscaler: a Cluster API-native cluster autoscaler.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

ROOT := $(abspath .)
BIN := $(ROOT)/bin
# Kubernetes, etcd and kwok binaries, built from source by hack/build-kube-binaries.sh.
KUBE_BIN := $(BIN)/k8s
TOOLS_MOD := $(ROOT)/hack/tools/go.mod

IMG ?= capi-autoscaler:dev
# The version `make release` builds: VERSION when the file exists, else the
# nearest tag (release from a tagged commit: clusterctl needs a semver).
RELEASE_VERSION ?= $(shell cat VERSION 2>/dev/null || git describe --tags --always --dirty)
RELEASE_DIR ?= $(ROOT)/out
# The image the release components default to (clusterctl wants a name with
# its registry) and that `make release` saves.
RELEASE_IMAGE ?= ghcr.io/capi-autoscaler/capi-autoscaler
# The platforms `make release` builds the kubectl plugin for, each named in
# the krew manifest (hack/krew), and where krew downloads the archives.
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
KREW_RELEASE_URL ?= https://github.com/capi-autoscaler/capi-autoscaler/releases/download/$(RELEASE_VERSION)
# The changelog every release target checks for an entry of RELEASE_VERSION.
RELEASE_CHANGELOG ?= $(ROOT)/CHANGELOG.md
# The variable the release's plugin says its version from (`version`).
PLUGIN_VERSION_VAR := github.com/capi-autoscaler/capi-autoscaler/internal/plugin.version
BASE_IMAGE ?= scratch
KUBECONFIG ?= $(HOME)/.kube/config
GO_TEST_FLAGS ?=
# Karpenter v1.14.3, in hack/karpenter-compare, needs a newer Go than the
# machine's; the go command fetches this one from the module proxy.
KARPENTER_GO := go1.26.10

CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
KUSTOMIZE := $(BIN)/kustomize
CRD_REF_DOCS := $(BIN)/crd-ref-docs
# krew, built from its own module: its client-go is not ours. The test of
# hack/krew installs the kubectl plugin with it (make test sets KREW_BINARY).
KREW_VERSION := v0.4.3
KREW := $(BIN)/krew-$(KREW_VERSION)/krew

export KUBEBUILDER_ASSETS := $(KUBE_BIN)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy functions.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/... paths=./e2e/framework/infrastructure/api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from kubebuilder markers.
	$(CONTROLLER_GEN) crd paths=./api/v1alpha1/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) crd paths=./api/capacitybuffer/... paths=./api/provisioningrequest/... output:crd:artifacts:config=config/workload-crd/bases
	go run ./hack/crdversions --served=v1alpha1 config/workload-crd/bases/autoscaling.x-k8s.io_capacitybuffers.yaml
	go run ./hack/crdversions --served=v1beta1 config/workload-crd/bases/autoscaling.x-k8s.io_provisioningrequests.yaml
	$(CONTROLLER_GEN) crd paths=./e2e/framework/infrastructure/api/... output:crd:artifacts:config=e2e/framework/infrastructure/config/crd
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths=./internal/... output:rbac:artifacts:config=config/rbac

.PHONY: helm-chart
helm-chart: manifests ## Generate the Helm chart's templates (charts/capi-autoscaler/templates) and version from config/ and metadata.yaml (docs/helm.md).
	go run ./hack/helmchart --repo-root=$(ROOT)

.PHONY: docs
docs: $(CRD_REF_DOCS) ## Generate the references of docs/reference: the ClusterAutoscaler API from its Go types (crd-ref-docs), and the manager's flags, annotations, labels, taints, event reasons, conditions and metrics from the code (hack/docsgen).
	$(CRD_REF_DOCS) --source-path=api/v1alpha1 --config=hack/crd-ref-docs/config.yaml --renderer=markdown --output-path=docs/reference/api.md
	go run ./hack/docsgen --repo-root=$(ROOT)

.PHONY: fmt
fmt: ## Format the code.
	go fmt ./...

.PHONY: vet
vet: ## Vet the code.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Lint the code with golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: generate manifests helm-chart docs ## Fail when generated files (the Helm chart and docs/reference included), formatting or go.mod drift.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "Files need gofmt:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	go mod tidy -diff
	@git diff --exit-code -- api config e2e/framework/infrastructure charts docs/reference || { echo "Generated files are out of date: run 'make generate manifests helm-chart docs' and commit."; exit 1; }
	@test -z "$$(git ls-files --others --exclude-standard -- api config e2e/framework/infrastructure charts docs/reference)" || { echo "Untracked generated files:"; git ls-files --others --exclude-standard -- api config e2e/framework/infrastructure charts docs/reference; exit 1; }

##@ Build

.PHONY: build
build: kubectl-plugin ## Build the manager binary and the kubectl plugin.
	go build -o $(BIN)/manager .

.PHONY: kubectl-plugin
kubectl-plugin: ## Build the kubectl plugin into bin/kubectl-capi_autoscaler (on the PATH, `kubectl capi-autoscaler` runs it).
	go build -o $(BIN)/kubectl-capi_autoscaler ./cmd/kubectl-capi_autoscaler

.PHONY: run
run: ## Run the manager against the cluster in KUBECONFIG.
	go run . --kubeconfig=$(KUBECONFIG) --diagnostics-address=:8080 --insecure-diagnostics --health-probe-bind-address=:8081

.PHONY: docker-build
docker-build: ## Build the manager image IMG (static binary; BASE_IMAGE defaults to scratch).
	CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o $(BIN)/image/manager .
	docker build --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMG) -f Dockerfile $(BIN)/image

##@ Test

.PHONY: tmux
tmux: ## Install tmux from the machine's Debian packages when it is missing (the kubectl plugin's terminal test needs it).
	@hack/ensure-tmux.sh

.PHONY: test
test: envtest-binaries e2e-binaries build tmux $(KUSTOMIZE) $(KREW) ## Run all tests, then the end-to-end specs CI runs: local stack, then kind + CAPD (builds what they need on first use).
	KREW_BINARY=$(KREW) go test $(GO_TEST_FLAGS) ./...
	$(MAKE) test-e2e-ci
	$(MAKE) test-kind KIND_LABELS=kind-smoke

# The local stack's ci specs spend their time waiting for loops, boots and
# timers, not computing: two stacks side by side halve the wall time.
.PHONY: test-e2e-ci test-e2e-ci-scale-up test-e2e-ci-rest
test-e2e-ci: e2e-binaries build ## Run the local stack's ci specs (what make test runs): the scale-up ones beside the rest, each on a stack of its own, then ci-separate.
	$(MAKE) -j2 --output-sync=target test-e2e-ci-scale-up test-e2e-ci-rest

test-e2e-ci-scale-up:
	go test -tags e2e -timeout 30m ./e2e/ -args -ginkgo.label-filter='ci && scale-up' -e2e.manager=$(BIN)/manager
	go test -tags e2e -timeout 10m ./e2e/ -args -ginkgo.label-filter=ci-separate -e2e.topology=SeparateWorkload -e2e.manager=$(BIN)/manager

test-e2e-ci-rest:
	go test -tags e2e -timeout 30m ./e2e/ -args -ginkgo.label-filter='ci && !scale-up' -e2e.manager=$(BIN)/manager

.PHONY: test-e2e
test-e2e: e2e-binaries ## Run the end-to-end suite on the local simulated stack, both topologies.
	go test -tags e2e -timeout 60m ./e2e/ -args -ginkgo.v -e2e.topology=SelfHosted
	go test -tags e2e -timeout 60m ./e2e/ -args -ginkgo.v -e2e.topology=SeparateWorkload

.PHONY: test-smoke
test-smoke: e2e-binaries ## Run the local stack smoke test (about 70s).
	go test -tags e2e -timeout 10m ./e2e/ -args -ginkgo.focus="Local stack"

# A soak applies operations for DURATION, then waits for the Cluster to
# settle (at most 5 minutes): the timeout leaves room for both.
SOAK_TIMEOUT ?= 3h

.PHONY: soak
soak: e2e-binaries build ## Run the seeded soak on the local stack (SEED=n, time-based when unset; DURATION=10m; TOPOLOGY=SelfHosted|SeparateWorkload; docs/reliability.md).
	go test -tags e2e -timeout $(SOAK_TIMEOUT) ./e2e/ -args -ginkgo.v -ginkgo.label-filter=soak -e2e.manager=$(BIN)/manager \
		-e2e.topology=$(or $(TOPOLOGY),SelfHosted) -e2e.soak.seed=$(or $(SEED),0) -e2e.soak.duration=$(or $(DURATION),10m)

.PHONY: day
day: e2e-binaries build ## Run a compressed day twice, consolidation off then Balanced, and compare their cost, into _artifacts/day.md (HOUR=20s a day's hour; TOPOLOGY; docs/cost.md).
	mkdir -p $(ROOT)/_artifacts
	go test -tags e2e -timeout 60m ./e2e/ -args -ginkgo.v -ginkgo.label-filter=day -e2e.manager=$(BIN)/manager \
		-e2e.topology=$(or $(TOPOLOGY),SelfHosted) -e2e.day.hour=$(or $(HOUR),20s) -e2e.day.report=$(ROOT)/_artifacts/day.md

.PHONY: envtest-binaries
envtest-binaries: ## Build kube-apiserver and etcd for envtest into bin/k8s.
	hack/build-kube-binaries.sh $(KUBE_BIN) kube-apiserver etcd

.PHONY: e2e-binaries
e2e-binaries: envtest-binaries ## Build the binaries of the local end-to-end stack into bin/k8s.
	hack/build-kube-binaries.sh $(KUBE_BIN) kube-scheduler kube-controller-manager kwok capi-manager

.PHONY: demo
demo: e2e-binaries build ## Watch the autoscaler scale a simulated cluster up and down (TOPOLOGY=SelfHosted|SeparateWorkload, KEEP=1 to keep it running).
	go run ./hack/demo --repo-root=$(ROOT) --topology=$(or $(TOPOLOGY),SelfHosted) $(if $(KEEP),--keep)

.PHONY: perf
perf: e2e-binaries build ## Measure scale-up latency, loop cost and memory on the local stack (not part of test; PERF_ARGS for flags).
	go run ./hack/perf --repo-root=$(ROOT) $(PERF_ARGS)

.PHONY: agreement
agreement: e2e-binaries build ## Compare kube-scheduler's and the simulator's feasible nodes on 5,000 generated pods for each of 3 seeds (docs/simulation.md; AGREEMENT_ARGS for flags).
	go test -v -tags e2e -timeout 60m ./e2e/ -args -ginkgo.focus="Scheduler agreement" -e2e.manager=$(BIN)/manager \
		-e2e.agreement-pods=5000 -e2e.agreement-runs=3 -e2e.agreement-nodes-per-kind=12 $(AGREEMENT_ARGS)

.PHONY: compare-karpenter
compare-karpenter: ## Time Karpenter's scheduler and our scale-up planner on Karpenter's benchmark pods, in one process (COMPARE_BENCH selects benchmarks).
	cd hack/karpenter-compare && GOTOOLCHAIN=$(KARPENTER_GO) go test -run '^$$' -bench '$(or $(COMPARE_BENCH),.)' -benchtime 1x -count 3 .

.PHONY: optimum
optimum: ## Measure how far our plans and Karpenter's are from the cheapest new nodes, which CBC computes, on generated mixes (installs coinor-cbc when missing; OPTIMUM_ARGS for flags, e.g. -mixes=40 -seed=1; docs/cost.md).
	@hack/ensure-cbc.sh
	cd hack/karpenter-compare && GOTOOLCHAIN=$(KARPENTER_GO) go run ./cmd/optimum $(OPTIMUM_ARGS)

.PHONY: localstack
localstack: e2e-binaries ## Run the local simulated stack until Ctrl-C (TOPOLOGY=SelfHosted|SeparateWorkload, MANAGER=path).
	go run ./hack/localstack --repo-root=$(ROOT) --topology=$(or $(TOPOLOGY),SelfHosted) $(if $(MANAGER),--manager=$(MANAGER))

##@ End to end on kind

.PHONY: e2e-host-check
e2e-host-check: ## Make Docker run kind's privileged containers here (installs a runtime shim only where they fail).
	hack/kind/host-check.sh

.PHONY: e2e-images
e2e-images: e2e-host-check ## Build every image the kind suite runs, offline; unchanged images are kept (docs/kind-e2e.md).
	KUBE_BIN=$(KUBE_BIN) hack/kind/build-images.sh all

.PHONY: e2e-image-node
e2e-image-node: e2e-host-check ## Build the kind node image kindest/node:v1.36.3.
	KUBE_BIN=$(KUBE_BIN) hack/kind/build-images.sh node

.PHONY: e2e-image-lb
e2e-image-lb: ## Build the load balancer image CAPD starts for each workload cluster.
	hack/kind/build-images.sh haproxy

.PHONY: e2e-image-capi
e2e-image-capi: ## Build the Cluster API, kubeadm, CAPD and capi-autoscaler manager images.
	hack/kind/build-images.sh capi

.PHONY: test-kind
test-kind: e2e-images ## Run the kind suite: a kind management cluster with Cluster API, CAPD and capi-autoscaler (docs/kind-e2e.md; KIND_ARGS=-kind.keep keeps it, KIND_LABELS=kind-smoke runs what make test runs).
	go test -tags kind ./e2e/kind/ -timeout 60m -v -args -ginkgo.v -ginkgo.label-filter=$(or $(KIND_LABELS),kind) $(KIND_ARGS)

##@ Deployment

.PHONY: deploy
deploy: $(KUSTOMIZE) ## Deploy the CRD, RBAC and manager (image IMG) to the cluster in KUBECONFIG.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | kubectl --kubeconfig=$(KUBECONFIG) apply -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove what deploy created from the cluster in KUBECONFIG.
	$(KUSTOMIZE) build config/default | kubectl --kubeconfig=$(KUBECONFIG) delete --ignore-not-found -f -

##@ Release

.PHONY: release
release: IMG = $(RELEASE_IMAGE):$(RELEASE_VERSION)
release: release-changelog release-manifests release-chart release-kubectl-plugin docker-build ## Write the release artifacts to RELEASE_DIR: clusterctl metadata and components, workload cluster components, monitoring, the Helm chart, the kubectl plugin and the image as a tarball.
	docker save -o $(RELEASE_DIR)/capi-autoscaler-image-$(RELEASE_VERSION).tar $(IMG)

.PHONY: release-changelog
release-changelog: ## Fail unless RELEASE_CHANGELOG (CHANGELOG.md) has a dated entry for RELEASE_VERSION; every release target runs it first.
	go run ./hack/changelog --version=$(RELEASE_VERSION) $(RELEASE_CHANGELOG)

.PHONY: release-kubectl-plugin
release-kubectl-plugin: release-changelog ## Write the kubectl plugin of RELEASE_VERSION for PLUGIN_PLATFORMS to RELEASE_DIR, one kubectl-capi_autoscaler-<os>-<arch>.tar.gz each (with its completion helper kubectl_complete-capi_autoscaler and the LICENSE), and its krew manifest krew-capi-autoscaler.yaml (no docker).
	mkdir -p $(RELEASE_DIR)
	for platform in $(PLUGIN_PLATFORMS); do \
		os=$${platform%/*} arch=$${platform#*/}; dir=$$(mktemp -d); \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags "-s -w -X $(PLUGIN_VERSION_VAR)=$(RELEASE_VERSION)" -o $$dir/kubectl-capi_autoscaler ./cmd/kubectl-capi_autoscaler; \
		install -m 0755 cmd/kubectl-capi_autoscaler/kubectl_complete-capi_autoscaler $$dir/; \
		install -m 0644 LICENSE $$dir/; \
		tar -czf $(RELEASE_DIR)/kubectl-capi_autoscaler-$$os-$$arch.tar.gz -C $$dir kubectl-capi_autoscaler kubectl_complete-capi_autoscaler LICENSE; \
		rm -r $$dir; \
	done
	hack/krew/manifest.sh $(RELEASE_VERSION) $(KREW_RELEASE_URL) $(RELEASE_DIR) $(PLUGIN_PLATFORMS)

.PHONY: release-manifests
release-manifests: release-changelog $(KUSTOMIZE) ## Write metadata.yaml, addon-components.yaml, workload-components.yaml and monitoring.yaml of RELEASE_VERSION to RELEASE_DIR (no docker).
	@[[ "$(RELEASE_VERSION)" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+ ]] || { echo "Release version '$(RELEASE_VERSION)' is not a semver like v0.1.0: tag the commit, write VERSION or pass RELEASE_VERSION=v0.1.0."; exit 1; }; \
	grep -A1 -x -- "- major: $${BASH_REMATCH[1]}" metadata.yaml | grep -qx -- "  minor: $${BASH_REMATCH[2]}" || { echo "metadata.yaml has no release series $${BASH_REMATCH[1]}.$${BASH_REMATCH[2]} for $(RELEASE_VERSION): add it with its Cluster API contract."; exit 1; }
	mkdir -p $(RELEASE_DIR)
	cp metadata.yaml $(RELEASE_DIR)/metadata.yaml
	$(KUSTOMIZE) build config/release | sed -e 's|RELEASE_IMAGE|$(RELEASE_IMAGE)|g' -e 's|RELEASE_VERSION|$(RELEASE_VERSION)|g' > $(RELEASE_DIR)/addon-components.yaml
	$(KUSTOMIZE) build config/workload-release > $(RELEASE_DIR)/workload-components.yaml
	$(KUSTOMIZE) build config/monitoring-release > $(RELEASE_DIR)/monitoring.yaml

.PHONY: release-chart
release-chart: release-changelog ## Write the Helm chart of RELEASE_VERSION, with RELEASE_IMAGE, to RELEASE_DIR as capi-autoscaler-<version>.tgz (no docker, no helm).
	@[[ "$(RELEASE_VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "Release version '$(RELEASE_VERSION)' is not a semver like v0.1.0: tag the commit, write VERSION or pass RELEASE_VERSION=v0.1.0."; exit 1; }
	go run ./hack/helmchart package --repo-root=$(ROOT) --version=$(RELEASE_VERSION) --image=$(RELEASE_IMAGE) --out=$(RELEASE_DIR)

##@ Tools

$(CONTROLLER_GEN): $(TOOLS_MOD)
	go build -modfile=$(TOOLS_MOD) -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): $(TOOLS_MOD)
	go build -modfile=$(TOOLS_MOD) -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(KUSTOMIZE): $(TOOLS_MOD)
	go build -modfile=$(TOOLS_MOD) -o $@ sigs.k8s.io/kustomize/kustomize/v5

$(CRD_REF_DOCS): $(TOOLS_MOD)
	go build -modfile=$(TOOLS_MOD) -o $@ github.com/elastic/crd-ref-docs

.PHONY: krew
krew: $(KREW) ## Build krew KREW_VERSION from its own Go module into bin/krew-<version>/krew, for the test that installs the kubectl plugin with it (make test builds it).

$(KREW):
	GOBIN=$(@D) go install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION)
