# kubectl-alfred: build, test, lint and the demo. `make help` lists the targets.
CARGO ?= cargo
DEMO ?= manifests/examples/demo-cluster.yaml
CERTS ?= certs
CLUSTER_DIR ?= tests/.run/local
# Where cargo builds: CARGO_TARGET_DIR when set, as cargo itself reads it.
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
DIST ?= $(TARGET_DIR)/dist
# Where the release archive is downloaded from: the krew manifest's uri is RELEASE_URL/ARCHIVE.
RELEASE_URL ?= https://github.com/OWNER/kubectl-alfred/releases/download/v$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# Names the serving certificate answers to: the in-cluster Service and this machine.
CERT_SANS ?= DNS:alfred-webhook.alfred-system.svc,DNS:alfred-webhook.alfred-system.svc.cluster.local,DNS:localhost,IP:127.0.0.1

.PHONY: help build test unit e2e soak oracle cluster-up cluster-down lint fmt demo crds crds-check bench bench-trace bench-bound bench-mix bench-churn bench-live install image image-test dist certs webhook-local loadtest loadtest-hostile loadtest-mix loadtest-wrk fuzz

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## Build every crate
	$(CARGO) build --workspace --all-targets

test: unit e2e ## Every test: unit, golden, CRD freshness, then end to end

unit: ## The tests that need no cluster
	$(CARGO) test --workspace

e2e: ## End to end: a local kube-apiserver and etcd (built once from Go modules), real kubectl and helm; then the short soak (12 minutes, every fault)
	tests/cluster/build.sh >/dev/null
	tests/helm/build.sh >/dev/null
	$(CARGO) build -p alfred-webhook -p kubectl-alfred
	$(CARGO) test -p alfred-e2e -- --ignored --test-threads=1
	tests/cluster/build-kwok.sh >/dev/null
	$(CARGO) build -p alfred-shared --example churn_bench
	$(CARGO) test -p alfred-soak -- --ignored --nocapture

oracle: ## The simulator and plans against kube-scheduler on more random clusters: make oracle CASES=3000 PLANS=300 SEED=1 K8S=v1.35.4
	tests/cluster/build.sh >/dev/null
	$(CARGO) build -p alfred-webhook -p kubectl-alfred
	ALFRED_ORACLE_CASES=$(or $(CASES),3000) ALFRED_ORACLE_PLANS=$(or $(PLANS),300) ALFRED_ORACLE_SEED=$(or $(SEED),1) \
	  $(CARGO) test -p alfred-e2e --test scheduler_oracle -- --ignored --nocapture

cluster-up: ## Start a local control plane in $(CLUSTER_DIR) (prints its kubeconfig)
	tests/cluster/up.sh $(CLUSTER_DIR)

cluster-down: ## Stop it (logs stay in $(CLUSTER_DIR)/logs)
	tests/cluster/down.sh $(CLUSTER_DIR)

lint: ## Formatting and clippy, warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## Format the code
	$(CARGO) fmt --all

demo: ## Recommend on the demo cluster: pool scores, planned moves and advice with reasons, node records (no cluster needed)
	$(CARGO) run -q -p kubectl-alfred -- recommend -f $(DEMO) --config manifests/examples/alfred-config-migration-v1.yaml

crds: ## Regenerate manifests/crds (shipped) and tests/crds (test copies of OME's CRDs) from the Rust types
	$(CARGO) run -q -p alfred-shared --example crds -- .

bench: ## Benchmarks: snapshot load (10k nodes, 80k pods), decision pass (10k nodes, 30k Instances), drain solver
	$(CARGO) run -q --release -p alfred-shared --example load_bench
	$(CARGO) run -q --release -p alfred-shared --example decision_bench -- 10000 30000 1000
	$(CARGO) run -q --release -p alfred-shared --example solver_bench -- 2000 0 1
	$(CARGO) run -q --release -p alfred-shared --example solver_bench -- 10000 100 1
	$(CARGO) bench -q -p alfred-webhook --bench review

bench-trace: ## Consolidation plans on the openb trace: make bench-trace OPENB=DIR (the trace's CSV files)
	@test -n "$(OPENB)" || { echo "set OPENB to the directory holding the openb trace's CSV files" >&2; exit 2; }
	$(CARGO) build -q --release -p alfred-shared --example trace_bench
	for list in default multigpu50; do for seed in 1 2 3; do for nodes in "" "--eight-gpu-nodes 10000"; do \
	  $(TARGET_DIR)/release/examples/trace_bench --nodes $(OPENB)/openb_node_list_gpu_node.csv \
	    --pods $(OPENB)/openb_pod_list_$$list.csv --load 0.95 --seed $$seed $$nodes || exit 1; done; done; done
	for list in default multigpu50; do \
	  $(TARGET_DIR)/release/examples/trace_bench --nodes $(OPENB)/openb_node_list_gpu_node.csv \
	    --pods $(OPENB)/openb_pod_list_$$list.csv --load 0.95 --seed 1 --repeat-nodes 4278 || exit 1; done

bench-bound: ## How far `recommend --plan` is from the fewest moves possible: its moves beside a proven lower bound (an integer program in HiGHS, tests/bench/fewest_moves.py) on openb replays: make bench-bound OPENB=DIR
	@test -n "$(OPENB)" || { echo "set OPENB to the directory holding the openb trace's CSV files" >&2; exit 2; }
	$(CARGO) build -q --release -p alfred-shared --example trace_bench
	$(CARGO) build -q --release -p kubectl-alfred
	test -x $(TARGET_DIR)/bound-venv/bin/python || { python3 -m venv $(TARGET_DIR)/bound-venv && $(TARGET_DIR)/bound-venv/bin/pip install -q highspy; }
	for list in default multigpu50; do for nodes in "" "--repeat-nodes 4278"; do \
	  $(TARGET_DIR)/release/examples/trace_bench --nodes $(OPENB)/openb_node_list_gpu_node.csv \
	    --pods $(OPENB)/openb_pod_list_$$list.csv --load 0.95 --seed 1 $$nodes --write $(TARGET_DIR)/bound-snapshot.json > /dev/null && \
	  $(TARGET_DIR)/release/kubectl-alfred recommend -f $(TARGET_DIR)/bound-snapshot.json \
	    --config shared/examples/churn/alfred-chart.yaml --plan -o json > $(TARGET_DIR)/bound-plan.json && \
	  echo "$$list $$nodes: $$($(TARGET_DIR)/bound-venv/bin/python tests/bench/fewest_moves.py $(TARGET_DIR)/bound-snapshot.json --plan $(TARGET_DIR)/bound-plan.json 2>/dev/null)" || exit 1; done; done

# The node mixes of bench-mix (COUNTxGPUSxMODELxCPUS): mostly single-GPU nodes beside a few
# 8-GPU ones; the same with the single-GPU nodes in the 8-GPU nodes' pools; 2- and 4-GPU nodes.
MIX_SINGLE := 2494x1xA10x128,902x1xT4x192,10x4xV100M32x128,432x8xG2x192,219x8xG3x192,122x8xV100M32x128,77x8xV100M16x128,22x8xA100x192
MIX_SHARED := 2494x1xG2x128,902x1xG3x192,10x4xV100M32x128,432x8xG2x192,219x8xG3x192,122x8xV100M32x128,77x8xV100M16x128,22x8xA100x192
MIX_SMALL := 1500x2xT4x104,600x4xT4x96,20x1xA10x128,400x8xG2x96,200x8xV100M32x96,58x8xG3x128

bench-mix: ## `recommend --plan` on clusters of mixed node sizes (multigpu50 at load 0.95, GPUs only, seeds 1-3, filled spreading by GPUs free and by share free): its moves beside the proven bound, and the plugin's time end to end: make bench-mix OPENB=DIR
	@test -n "$(OPENB)" || { echo "set OPENB to the directory holding the openb trace's CSV files" >&2; exit 2; }
	$(CARGO) build -q --release -p alfred-shared --example trace_bench
	$(CARGO) build -q --release -p kubectl-alfred
	test -x $(TARGET_DIR)/bound-venv/bin/python || { python3 -m venv $(TARGET_DIR)/bound-venv && $(TARGET_DIR)/bound-venv/bin/pip install -q highspy; }
	for mix in SINGLE SHARED SMALL; do for fill in most-free free-share; do for seed in 1 2 3; do \
	  case $$mix in SINGLE) nodes="$(MIX_SINGLE)";; SHARED) nodes="$(MIX_SHARED)";; SMALL) nodes="$(MIX_SMALL)";; esac; \
	  $(TARGET_DIR)/release/examples/trace_bench --node-mix $$nodes --pods $(OPENB)/openb_pod_list_multigpu50.csv \
	    --load 0.95 --seed $$seed --fill $$fill --gpus-only --write $(TARGET_DIR)/mix-snapshot.json | grep -E '^(plan|steps)' && \
	  /usr/bin/time -f "plugin end to end: %e s, %M KiB" $(TARGET_DIR)/release/kubectl-alfred recommend -f $(TARGET_DIR)/mix-snapshot.json \
	    --config shared/examples/churn/alfred-chart.yaml --plan -o json > $(TARGET_DIR)/mix-plan.json && \
	  echo "$$mix $$fill $$seed: $$($(TARGET_DIR)/bound-venv/bin/python tests/bench/fewest_moves.py $(TARGET_DIR)/mix-snapshot.json --plan $(TARGET_DIR)/mix-plan.json --gpus-only 2>/dev/null)" || exit 1; done; done; done

bench-churn: ## Fragmentation over time: the closed-loop replay of the openb trace (24 h after 2 h of warm-up), Alfred off or on with a configuration of shared/examples/churn (the chart alone; with followPlan; with a hold; 60 moves an hour, with and without a hold); JSON lines: make bench-churn OPENB=DIR [SEEDS="1 2 3"] [LOADS="0.9 0.97"] [ALFRED="off chart-plain chart chart-hold 60-an-hour 60-an-hour-hold"]
	@test -n "$(OPENB)" || { echo "set OPENB to the directory holding the openb trace's CSV files" >&2; exit 2; }
	$(CARGO) build -q --release -p alfred-shared --example churn_bench
	for list in default multigpu50; do for load in $(or $(LOADS),0.9 0.97); do for seed in $(or $(SEEDS),1 2 3); do \
	  for profile in default gpu-packing; do for alfred in $(or $(ALFRED),off chart-plain chart chart-hold 60-an-hour 60-an-hour-hold); do \
	    case $$alfred in off) with="--alfred off";; \
	      *) test -f shared/examples/churn/alfred-$$alfred.yaml || { echo "ALFRED: off, or NAME of shared/examples/churn/alfred-NAME.yaml" >&2; exit 2; }; \
	         with="--alfred on --config shared/examples/churn/alfred-$$alfred.yaml";; esac; \
	    $(TARGET_DIR)/release/examples/churn_bench --nodes $(OPENB)/openb_node_list_gpu_node.csv \
	      --pods $(OPENB)/openb_pod_list_$$list.csv --load $$load --seed $$seed --profile $$profile $$with || exit 1; \
	  done; done; done; done; done

soak: ## The soak: arrivals, moves and faults through a real API server, kube-scheduler, KWOK and 3 caretakers, judged from the outside; one JSON line: make soak [OPENB=DIR (the openb trace, 12x faster; else the small built-in world, 60x)] [MINUTES=120] [SEED=1] [FAULTS=no]
	tests/cluster/build.sh >/dev/null
	tests/cluster/build-kwok.sh >/dev/null
	$(CARGO) build -q -p alfred-webhook -p kubectl-alfred -p alfred-soak
	$(CARGO) build -q --release -p alfred-shared --example churn_bench
	$(CARGO) build -q --release -p kubectl-alfred
	minutes=$(or $(MINUTES),120); hours=$$(python3 -c "print(round($$minutes / 60 - 0.25, 4))"); \
	if [ -n "$(OPENB)" ]; then \
	  world="--nodes $(OPENB)/openb_node_list_gpu_node.csv --pods $(OPENB)/openb_pod_list_default.csv --load 0.97 --time-scale 12"; \
	  config=tests/soak/data/alfred-openb.yaml; \
	else \
	  world="--nodes tests/soak/data/nodes.csv --pods tests/soak/data/tasks.csv --load 0.9 --time-scale 60"; \
	  config=tests/soak/data/alfred-short.yaml; \
	fi; \
	$(TARGET_DIR)/release/examples/churn_bench $$world --seed $(or $(SEED),1) --hours $$hours --warmup 0.25 \
	  --schedule-out $(TARGET_DIR)/soak-schedule.json >/dev/null && \
	$(TARGET_DIR)/debug/alfred-soak --schedule $(TARGET_DIR)/soak-schedule.json --config $$config \
	  --minutes $$minutes --plugin $(abspath $(TARGET_DIR))/release/kubectl-alfred $(if $(filter no,$(FAULTS)),--no-faults)

bench-live: ## Live reads against file replays on a seeded local control plane (10,000 nodes, 41,000 pods): time and peak memory
	tests/cluster/build.sh >/dev/null
	$(CARGO) build --release -p kubectl-alfred
	$(CARGO) build -p alfred-e2e --example live_bench
	$(TARGET_DIR)/debug/examples/live_bench 10000 41000 3

install: ## Put kubectl-alfred and its completion helper on PATH (so `kubectl alfred` works and completes)
	$(CARGO) install --locked --path kubectl-alfred
	install -m 0755 kubectl-alfred/kubectl_complete-alfred "$${CARGO_HOME:-$$HOME/.cargo}/bin/"

image: ## Container images without a Docker daemon (buildah): static binaries FROM scratch, tagged as the chart pulls them (IMAGE_REGISTRY, IMAGE_TAG)
	images/build.sh

image-test: image ## Prove the images run: a static binary, started as the non-root user from the image's own file system
	images/test.sh

dist: ## The release archive for this platform and its krew manifest in $(DIST)/ (set RELEASE_URL)
	$(CARGO) build --locked --release -p kubectl-alfred
	dist/package.sh $(TARGET_DIR)/release $(DIST) $(RELEASE_URL)

certs: ## A local CA and serving certificate for the webhook in $(CERTS)/ (ca.crt, tls.crt, tls.key)
	@mkdir -p $(CERTS)
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
	  -subj "/CN=alfred-webhook local CA" -keyout $(CERTS)/ca.key -out $(CERTS)/ca.crt 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	  -subj "/CN=alfred-webhook.alfred-system.svc" -keyout $(CERTS)/tls.key -out $(CERTS)/tls.csr 2>/dev/null
	printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$(CERT_SANS)" > $(CERTS)/tls.ext
	openssl x509 -req -in $(CERTS)/tls.csr -CA $(CERTS)/ca.crt -CAkey $(CERTS)/ca.key -CAcreateserial \
	  -days 90 -extfile $(CERTS)/tls.ext -out $(CERTS)/tls.crt 2>/dev/null
	@rm -f $(CERTS)/tls.csr $(CERTS)/tls.ext $(CERTS)/ca.srl
	@echo "wrote $(CERTS)/ca.crt, $(CERTS)/tls.crt, $(CERTS)/tls.key; caBundle: base64 -w0 $(CERTS)/ca.crt"

webhook-local: certs ## Run the webhook on this machine without a cluster (https://127.0.0.1:8443)
	$(CARGO) run -q --release -p alfred-webhook -- --standalone --addr 127.0.0.1:8443 \
	  --probe-addr 127.0.0.1:8080 --tls-cert $(CERTS)/tls.crt --tls-key $(CERTS)/tls.key --log-format text

# The webhook without a cluster on test ports, in the background of a recipe line; $$pid is it.
LOADTEST_WEBHOOK = $(TARGET_DIR)/release/alfred-webhook --standalone --addr 127.0.0.1:18443 \
	  --probe-addr 127.0.0.1:18080 --tls-cert $(CERTS)/tls.crt --tls-key $(CERTS)/tls.key \
	  --shutdown-delay 0s --operator-defaults manifests/webhook/inferenceservice-config.example.yaml \
	  >/dev/null 2>&1 & pid=$$!; trap "kill $$pid" EXIT; sleep 1
LOADGEN = $(TARGET_DIR)/release/examples/loadgen --addr 127.0.0.1:18443 --ca $(CERTS)/ca.crt --connections 16

loadtest: certs ## The webhook under load over TLS: as fast as it goes for a minute, then 5,000 reviews/s
	$(CARGO) build -q --release -p alfred-webhook --bin alfred-webhook --example loadgen
	@$(LOADTEST_WEBHOOK); \
	$(LOADGEN) --seconds 60 --pid $$pid && $(LOADGEN) --seconds 10 --rate 5000 --pid $$pid

loadtest-hostile: certs ## 1,000 reviews/s for 20 s beside 200 stalled-body and 30 slow-loris clients
	$(CARGO) build -q --release -p alfred-webhook --bin alfred-webhook --example loadgen
	@$(LOADTEST_WEBHOOK); \
	$(LOADGEN) --seconds 20 --rate 1000 --stalled 200 --loris 30 --pid $$pid

loadtest-mix: ## Write the load mix as the API server sends it into target/loadtest-mix (wrk, fuzz)
	$(CARGO) run -q --release -p alfred-webhook --example loadgen -- --write-mix target/loadtest-mix

loadtest-wrk: certs loadtest-mix ## The same mix at full rate with wrk (apt-get install wrk), a second opinion
	@command -v wrk >/dev/null || { echo "wrk is not installed: apt-get install wrk" >&2; exit 1; }
	$(CARGO) build -q --release -p alfred-webhook --bin alfred-webhook
	@$(LOADTEST_WEBHOOK); \
	FIXTURES=target/loadtest-mix wrk -t1 -c16 -d10s --latency -s webhook/examples/wrk-mix.lua https://127.0.0.1:18443

fuzz: loadtest-mix ## Fuzz every reader for FUZZ_SECONDS each (default 120): reviews, operator defaults, snapshots, alfredConfig, solve files (nightly)
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	cd webhook && mkdir -p fuzz/corpus/review fuzz/corpus/operator_defaults && \
	  cp tests/fixtures/*.json fuzz/corpus/review/ && \
	  for f in ../target/loadtest-mix/*.json; do cp $$f fuzz/corpus/review/sent-$${f##*/}; done && \
	  cp ../manifests/webhook/inferenceservice-config.example.yaml fuzz/corpus/operator_defaults/ && \
	  for t in review operator_defaults; do \
	    cargo +nightly fuzz run $$t -- -max_total_time=$${FUZZ_SECONDS:-120} || exit 1; done
	cd shared && mkdir -p fuzz/corpus/snapshot fuzz/corpus/config fuzz/corpus/solve && \
	  cp ../manifests/examples/demo-cluster.yaml fuzz/corpus/snapshot/ && \
	  { python3 -c 'import yaml,sys; [open(f"fuzz/corpus/snapshot/item-{i}.yaml","w").write(yaml.safe_dump(o)) for i,o in enumerate(o for d in yaml.safe_load_all(open(sys.argv[1])) if d for o in d.get("items",[d]))]' ../manifests/examples/demo-cluster.yaml || true; } && \
	  cp ../manifests/examples/alfred-config-*.yaml fuzz/corpus/config/ && \
	  cp ../manifests/examples/solve-drain.yaml fuzz/corpus/solve/ && \
	  for t in snapshot config solve; do \
	    cargo +nightly fuzz run $$t -- -max_total_time=$${FUZZ_SECONDS:-120} || exit 1; done