# rlcpp: the two commands a new user needs are `make demo` and `make test`.
# Each installs the Debian packages it needs (scripts/deps.sh), builds, then runs.

BUILD_DIR  ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
FUZZ_SECONDS ?= 300
RLCPP_FIXTURES ?= $(abspath $(firstword $(wildcard ../shared/fixtures tests/fixtures)))

.PHONY: all deps configure build test demo bench fuzz clean

all: build

deps:
	bash scripts/deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps
	$(MAKE) build
	cd $(BUILD_DIR) && RLCPP_FIXTURES=$(RLCPP_FIXTURES) ctest --output-on-failure -j $(JOBS)

demo: deps
	$(MAKE) build
	bash scripts/demo.sh $(BUILD_DIR)/rlcpp

bench: build
	@echo "benchmarks: $(BUILD_DIR)/bench_forward --help"

fuzz:
	bash fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR)
