# kubectl-alfred: build, test, lint and the demo. `make help` lists the targets.
CARGO ?= cargo
DEMO ?= manifests/examples/demo-cluster.yaml

.PHONY: help build test lint fmt demo crds crds-check bench install

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## Build every crate
	$(CARGO) build --workspace --all-targets

test: ## Run every test (unit, golden, CRD freshness)
	$(CARGO) test --workspace

lint: ## Formatting and clippy, warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## Format the code
	$(CARGO) fmt --all

demo: ## Draw the demo cluster's GPU pools (no cluster needed)
	$(CARGO) run -q -p kubectl-alfred -- pools -f $(DEMO)

crds: ## Regenerate manifests/crds from the Rust types
	$(CARGO) run -q -p alfred-shared --example crds -- manifests/crds

bench: ## Benchmarks: snapshot load (10k nodes, 80k pods), drain solver (2k and 10k containers)
	$(CARGO) run -q --release -p alfred-shared --example load_bench
	$(CARGO) run -q --release -p alfred-shared --example solver_bench -- 2000 0 1
	$(CARGO) run -q --release -p alfred-shared --example solver_bench -- 10000 100 1

install: ## Put kubectl-alfred on PATH (so `kubectl alfred` works)
	$(CARGO) install --locked --path kubectl-alfred
