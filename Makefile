# inplace-rollout: `make demo` runs the main job on the local control plane; `make test` runs every test; `make fuzz` fuzzes.
SHELL := /usr/bin/env bash
export GOTOOLCHAIN := local
export GOFLAGS := -buildvcs=false

GO      ?= go
BIN     := .dev/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PKGS     = $(shell $(GO) list ./...)

.PHONY: all build release image task-digest tools test test-realnode fuzz lint bench chaos demo cluster-up cluster-down clean

all: build

## build: the inplace-rollout binary in .dev/bin
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/inplace-rollout ./cmd/inplace-rollout

# The static binaries of a release and of the image, built alike into the directory $(1) for
# linux on the architectures $(2) (default amd64 and arm64): the same source and VERSION give the
# same bytes, so the image's digest can be pinned before a release. The puller is the command of
# pre-pull's puller pods, which copy it from the image.
define static-binaries
	mkdir -p $(1)
	for arch in $(or $(2),amd64 arm64); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" \
			-o $(1)/inplace-rollout-linux-$$arch ./cmd/inplace-rollout || exit 1; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w" \
			-o $(1)/puller-linux-$$arch ./cmd/puller || exit 1; \
	done
endef

# The OCI image layout dist/image from the binaries in $(1); its digest goes to dist/image.digest.
IMAGE_REPO ?= ghcr.io/inplace-rollout/inplace-rollout
CA_CERTS   ?= /etc/ssl/certs/ca-certificates.crt
TASK       := tekton/task/inplace-rollout/0.1/inplace-rollout.yaml
define oci-image
	rm -rf dist/image
	$(GO) run ./hack/image -out dist/image -ca-certs $(CA_CERTS) \
		-binary linux/amd64=$(1)/inplace-rollout-linux-amd64 -binary linux/arm64=$(1)/inplace-rollout-linux-arm64 \
		-puller linux/amd64=$(1)/puller-linux-amd64 -puller linux/arm64=$(1)/puller-linux-arm64 \
		$(if $(PUSH),-push $(IMAGE_REPO):$(VERSION)) > dist/image.digest
	@echo "$(IMAGE_REPO)@$$(cat dist/image.digest)"
endef

## release: in dist/: inplace-rollout binaries for linux, darwin and windows on amd64 and arm64 (inplace-rollout-OS-ARCH, .exe on windows) and the puller for linux; krew archives holding kubectl-inplace_rollout (kubectl-inplace_rollout-OS-ARCH.tar.gz, .zip on windows); checksums.txt (sha256sum of every binary and archive); the krew manifest inplace-rollout.yaml pointing at RELEASE_URL; sbom.cdx.json (CycloneDX, the linux/amd64 binary's modules); argo-rollouts-config.yaml and argo-helm-values.yaml (for Argo's Helm chart) pointing at RELEASE_URL with the linux/amd64 binary's sha256; the image in dist/image; and the Helm chart inplace-rollout-SEMVER.tgz with that image's digest (hack/chart-package.sh); refuses when the Task's image is not this image's digest
# The release is this target and small Go programs (hack/archive, hack/krewmanifest, hack/image),
# not GoReleaser or ko: the Go module proxy serves no approved GoReleaser release, and ko cannot
# build our image, which holds two binaries and CA certificates. Every file is built alike on
# every machine: the same source and VERSION give the same bytes. The SBOM is cyclonedx-gomod's
# `bin` mode on the shipped linux/amd64 binary, given VERSION, without timestamp or serial number:
# its `app` mode takes the main module's version from git tags instead, and fails in a git worktree.
RELEASE_URL ?= https://github.com/inplace-rollout/inplace-rollout/releases/download/$(VERSION)
KREW_BIN    := kubectl-inplace_rollout
release:
	rm -rf dist && mkdir -p dist
	$(call static-binaries,dist)
	for os in darwin windows; do for arch in amd64 arm64; do \
		ext=; [ $$os = windows ] && ext=.exe; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" \
			-o dist/inplace-rollout-$$os-$$arch$$ext ./cmd/inplace-rollout || exit 1; \
	done; done
	$(GO) build -o dist/.archive ./hack/archive
	for os in linux darwin windows; do for arch in amd64 arm64; do \
		ext=; out=dist/$(KREW_BIN)-$$os-$$arch.tar.gz; \
		[ $$os = windows ] && { ext=.exe; out=dist/$(KREW_BIN)-$$os-$$arch.zip; }; \
		dist/.archive -o $$out -exec $(KREW_BIN)$$ext dist/inplace-rollout-$$os-$$arch$$ext=$(KREW_BIN)$$ext || exit 1; \
	done; done
	rm dist/.archive
	cd dist && sha256sum inplace-rollout-* puller-* $(KREW_BIN)-* > checksums.txt
	$(GO) run ./hack/krewmanifest -version $(VERSION) -url $(RELEASE_URL) -o dist/inplace-rollout.yaml dist/$(KREW_BIN)-*
	hack/tools/build.sh cyclonedx-gomod
	$(BIN)/cyclonedx-gomod bin -json -noserial -notimestamp -version $(VERSION) -output dist/sbom.cdx.json dist/inplace-rollout-linux-amd64
	hack/argo-config.sh $(RELEASE_URL) > dist/argo-rollouts-config.yaml
	hack/argo-config.sh $(RELEASE_URL) amd64 config/argo/helm-values.yaml > dist/argo-helm-values.yaml
	$(call oci-image,dist)
	hack/chart-package.sh dist "$$(cat dist/image.digest)" $(VERSION)
	@d=$$(cat dist/image.digest); grep -q "image: $(IMAGE_REPO)@$$d\$$" $(TASK) || { \
		echo "$(TASK) does not pin this release's image $(IMAGE_REPO)@$$d"; \
		echo "run: make task-digest VERSION=$(VERSION), commit $(TASK), and make release again"; exit 1; }

## image: the container image without Docker: static binaries (inplace-rollout and the puller), CA certificates (CA_CERTS), user 65532, as an OCI image layout in dist/image (linux/amd64 and linux/arm64); prints its digest, also in dist/image.digest; PUSH=1 pushes it to IMAGE_REPO:VERSION (credentials from the Docker config: docker or crane login)
image:
	rm -rf dist/image-bin
	$(call static-binaries,dist/image-bin)
	$(call oci-image,dist/image-bin)

## task-digest: build the image and pin the Task's step image to its digest (the same VERSION as the release's)
task-digest: image
	@d=$$(cat dist/image.digest); \
	sed -i -E "s#(image: $(IMAGE_REPO))@sha256:[0-9a-f]{64}\$$#\1@$$d#" $(TASK); \
	grep -q "image: $(IMAGE_REPO)@$$d\$$" $(TASK) || { echo "$(TASK) has no step image $(IMAGE_REPO)@sha256:... to pin"; exit 1; }; \
	echo "$(TASK): $(IMAGE_REPO)@$$d"

## tools: etcd, kube-apiserver, kube-controller-manager, kubectl, kubelet, prometheus, staticcheck, rollouts-controller, kubectl-argo-rollouts, tekton-controller, crane, helm, cyclonedx-gomod, kubectl-krew, validate-krew-manifest (cached per machine)
tools:
	hack/tools/build.sh

## test: unit and integration tests against the real local control plane; every fuzz target runs its seeds and the failing inputs committed under testdata/fuzz, but no fuzzing (make fuzz)
# One shell line, so that the leftover check runs even when a test step fails.
test: tools
	rc=0; \
	$(GO) test -count=1 -timeout 25m $(PKGS) || rc=1; \
	hack/check-leftovers.sh || rc=1; \
	exit $$rc

## test-realnode: the whole real-node suite (make test runs its short form): the CLI on every workload kind, analysis on the real app's metrics, the readiness gate, pre-pull, a crash, a missing tag, back-and-forth rollouts and a SIGKILL resume, lifecycle hooks (HTTP through the pod proxy, handshakes, failures, a SIGKILL between a hook and the patch) on the real kubelet and containerd, and every conformance row on both the simulator and the real node; as root, with Debian's containerd, runc and CNI plugins (.ci/run installs them)
test-realnode: tools
	rc=0; \
	INPLACE_ROLLOUT_REAL_NODE_SUITE=full $(GO) test -count=1 -v -timeout 40m ./test/integration/realnode/... || rc=1; \
	hack/check-leftovers.sh || rc=1; exit $$rc

## fuzz: fuzz each of the 11 fuzz targets for about FUZZTIME (90s, 5m, 1h; default 60s); a failing input lands in the package's testdata/fuzz, to commit with its fix
# Each target runs as counted runs of the size beside it until FUZZTIME is spent (hack/fuzz.sh),
# never with a -fuzztime duration: Go 1.26's fuzzer can fail a duration run at its deadline on a
# loaded machine with no failing input (golang/go#75804), and a count has no deadline. A run
# links its own test binary, so the sizes make a run take 10 to 30 seconds on two loaded cores.
FUZZTIME ?= 60s
fuzz:
	rc=0; \
	hack/fuzz.sh $(FUZZTIME) ./analysis FuzzDecode 100000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./pkg/rollout FuzzSpecFile 20000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./pkg/rollout FuzzBatches 10000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./cmd/inplace-rollout FuzzImageAndBatchFlags 10000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./cmd/inplace-rollout FuzzResourceFlags 10000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./cmd/inplace-rollout FuzzHooksFlag 10000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./plugin/argospec FuzzDecode 20000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./tekton/customrun FuzzSpec 15000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./pkg/workload FuzzParseLock 15000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./pkg/rollout FuzzRecord 15000 || rc=1; \
	hack/fuzz.sh $(FUZZTIME) ./pkg/inplace FuzzReadState 50000 || rc=1; \
	exit $$rc

## lint: gofmt, go vet, staticcheck, and no function over 80 lines in the engine and its drivers
lint:
	hack/tools/build.sh staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	$(GO) run ./hack/funclen -max 80 pkg plugin tekton controller cmd

## bench: the side-by-side report docs/benchmarks.md and its plots (inplace-rollout, a floor loop, the StatefulSet and Deployment rolling updates and OpenKruise's CloneSet, at 100, 300 and 1,000 pods, 5 interleaved repetitions, every driver at one rate limit, then each at its own default, then inplace-rollout and the floor at 1,000 and 5,000 pods on 50 simulated kubelets; kruise-manager is built once, on first use), then the Go benchmarks, the Argo plugins' latency and API calls on 100 pods, the Tekton controller's latency and memory, 50 concurrent rollouts of 20 pods through one Argo step plugin process and through the Tekton controller (INPLACE_ROLLOUT_BENCH_ROLLOUTS and INPLACE_ROLLOUT_BENCH_PODS change the shape), the Argo path beside the CLI's on those 1,000 pods in one StatefulSet (docs/benchmarks-drivers.md), pre-pull's not-Ready window, and the real node's benchmarks at 100 pods under load (docs/benchmarks-realnode.md: a StatefulSet in place and recreated, plain, with the readiness gate and with a preStop hook; docs/benchmarks-realnode-workloads.md: a Deployment in place and recreated, and OpenKruise's CloneSet in place)
bench: tools build
	hack/tools/build.sh kruise-manager
	$(GO) run ./hack/benchreport -out docs -cli $(BIN)/inplace-rollout
	$(GO) test -run '^$$' -bench . -benchmem $(shell $(GO) list ./... | grep -v /test/integration)
	$(GO) test -run '^$$' -bench 'ArgoStepRun|ArgoTrafficSetWeight' -benchmem -benchtime 1x -timeout 30m ./test/integration/scale
	printf '# Benchmarks of the drivers\n\nWritten by `make bench` on %s (%s CPUs), on the local control plane and its simulated kubelets.\n\n' "$$(date -u '+%Y-%m-%d %H:%M UTC')" "$$(nproc)" > docs/benchmarks-drivers.md
	INPLACE_ROLLOUT_BENCH_DRIVERS_OUT=$(CURDIR)/docs/benchmarks-drivers.md $(GO) test -run '^$$' -bench 'ArgoConcurrentRollouts|ArgoBesideCLI' -benchtime 1x -timeout 90m ./test/integration/scale
	$(GO) test -run '^$$' -bench CustomRunLatency -benchtime 3x -timeout 10m ./test/integration/tekton
	INPLACE_ROLLOUT_BENCH_DRIVERS_OUT=$(CURDIR)/docs/benchmarks-drivers.md $(GO) test -run '^$$' -bench TektonConcurrentRollouts -benchtime 1x -timeout 60m ./test/integration/tekton
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 10m ./test/integration/prepull
	INPLACE_ROLLOUT_BENCH_OUT=$(CURDIR)/docs/benchmarks-realnode.md $(GO) test -run '^$$' -bench RealNode -benchtime 1x -timeout 180m ./test/integration/realnode/e2e
	INPLACE_ROLLOUT_BENCH_OUT=$(CURDIR)/docs/benchmarks-realnode-workloads.md INPLACE_ROLLOUT_REAL_NODE_VARIANTS=deployment,cloneset \
		$(GO) test -run '^$$' -bench RealNode -benchtime 1x -timeout 180m ./test/integration/realnode/e2e
	hack/check-leftovers.sh

## chaos: the chaos suite's long form: CHAOS_KILLS random SIGKILLs of 30-pod rollouts and rollbacks, 45% of the CLI, 20% of the Argo plugin process, 20% of the Tekton controller, 15% of the InPlaceRollout controller; kube-apiserver and etcd restarted, a concurrent labeller, a pod deleted and the StatefulSet scaled mid-rollout (make test runs it with 10 kills); CHAOS_SEED replays a run
CHAOS_KILLS ?= 100
chaos: tools
	rc=0; \
	INPLACE_ROLLOUT_CHAOS_KILLS=$(CHAOS_KILLS) INPLACE_ROLLOUT_CHAOS_SEED=$(CHAOS_SEED) \
		$(GO) test -count=1 -v -timeout 60m ./test/integration/chaos || rc=1; \
	hack/check-leftovers.sh || rc=1; exit $$rc

## demo: bring the local control plane up and run the demo against it
demo: cluster-up build
	hack/demo.sh

## cluster-up: start the local control plane and its OCI registry holding this source's image (IMAGE in .dev/env, every command's default puller image), the InPlaceRollout controller and the readiness gate controller in the background (.dev/env, .dev/kubeconfig); ARGO=1 adds Argo Rollouts with our plugins; TEKTON=1 adds Tekton Pipelines and our CustomRun controller; NODE=real adds the real node real-0 (kubelet and containerd, as root)
# The image pushed into the local registry is built for this machine's architecture only: it is
# what the kubelets here pull.
LOCAL_ARCH := $(shell $(GO) env GOARCH)
cluster-up: tools build
	$(GO) build -o $(BIN)/localcluster ./test/integration/cmd/localcluster
	rm -rf .dev/image .dev/image-bin
	$(call static-binaries,.dev/image-bin,$(LOCAL_ARCH))
	$(GO) run ./hack/image -out .dev/image -ca-certs $(CA_CERTS) \
		-binary linux/$(LOCAL_ARCH)=.dev/image-bin/inplace-rollout-linux-$(LOCAL_ARCH) \
		-puller linux/$(LOCAL_ARCH)=.dev/image-bin/puller-linux-$(LOCAL_ARCH) >/dev/null
	IMAGE_DIR=.dev/image IMAGE_TAG=$(VERSION) hack/cluster-up.sh

## cluster-down: stop every process cluster-up started
cluster-down:
	hack/cluster-down.sh

clean: cluster-down
	rm -rf .dev
