# rlcpp: the two commands a new user needs are `make demo` and `make test`.
# Each installs the Debian packages it needs (scripts/deps.sh), builds, then runs.

BUILD_DIR  ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 300

.PHONY: all deps configure build test demo demo-code demo-tools bench faults fuzz fixtures clean gpu-deps gpu-rehearsal

all: build

deps:
	bash scripts/deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

configure: $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps
	$(MAKE) build
	cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS)
	$(MAKE) gpu-rehearsal

# The GPU check's rehearsal (scripts/gpu_check.sh --rehearse): the dependency folder a GPU machine
# builds with, a build from it in a clean folder with the system's copies hidden (no MPI, no tests,
# the fast profile), and each check's CPU part. `make gpu-deps` makes the folder alone, to carry.
gpu-deps:
	bash scripts/gpu_deps.sh gpu-deps

gpu-rehearsal:
	bash scripts/gpu_deps.sh $(BUILD_DIR)/gpu-deps
	bash scripts/gpu_check.sh --rehearse --deps $(BUILD_DIR)/gpu-deps.tar.xz --out $(BUILD_DIR)/gpu-check

demo: deps
	$(MAKE) build
	bash scripts/demo.sh $(BUILD_DIR)/rlcpp

# GRPO with a code reward (-rt code: programs run against tests in the sandbox) on the bundled code
# task: pass@1 and pass@k before and after, and the reward curve.
demo-code: deps
	$(MAKE) build
	bash scripts/demo_code.sh $(BUILD_DIR)/rlcpp

# Multi-turn GRPO with a calculator tool on the bundled tool-use task: accuracy and the share of
# answers that call the tool before and after, the training curve and the token-exactness check.
demo-tools: deps
	$(MAKE) build
	bash scripts/demo_tools.sh $(BUILD_DIR)/rlcpp

# Fault injection: the matrix (tests/faults/matrix.sh: CASES seeded draws of a mode combination,
# a victim, a moment and a fault, each ended cleanly and resumed equal to the run never faulted);
# asynchronous runs (partial rollouts; groups in completion order; multi-turn episodes in
# completion order) killed with kill -9 at KILLS random moments; the round a
# checkpoint cuts, killed and resumed under a tensor-parallel engine, LoRA and ZeRO-3.
KILLS ?= 20
CASES ?= 24
SEED ?= 1
faults: deps
	$(MAKE) build
	CASES=$(CASES) SEED=$(SEED) bash tests/faults/matrix.sh $(BUILD_DIR)/rlcpp
	KILLS=$(KILLS) bash tests/faults_async.sh $(BUILD_DIR)/rlcpp
	MODE=completion KILLS=$(KILLS) bash tests/faults_async.sh $(BUILD_DIR)/rlcpp
	MODE=episodes KILLS=$(KILLS) bash tests/faults_async.sh $(BUILD_DIR)/rlcpp
	bash tests/faults_cut.sh $(BUILD_DIR)/rlcpp

# Every side-by-side benchmark against its anchor (llama.cpp, PyTorch eager, TRL, transformers) and one table of
# ratios (bench/all.sh; QUICK=1 for a smoke run of minutes, the full run takes hours on 2 cores).
bench: deps
	$(MAKE) build
	bash bench/all.sh $(BUILD_DIR)

# The test models and their float64 references (tests/fixtures/, committed): written again by the
# repository's own script (Debian's python3-numpy); the fixtures_reproducible test checks they match.
fixtures:
	/usr/bin/python3 tests/fixtures/make_fixtures.py

fuzz:
	bash fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR)
