# The two commands a new user needs: `make run` and `make test`.
# Everything else is CMake + Ninja under build/.

BUILD_DIR ?= build
BUILD_TYPE ?= Release
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RUN_ARGS ?=

.PHONY: all bootstrap configure build run test test-unit test-integration bench tsan clean

all: build

bootstrap:
	@scripts/bootstrap

configure: bootstrap
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The daemon in the foreground on the built-in simulator with the default
# configuration; `build/bin/rasctl status` answers from another shell.
run: build
	$(BUILD_DIR)/bin/rasd $(RUN_ARGS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 300

test-unit: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -L unit

test-integration: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -L integration

# Each benchmark writes its JSON to build/bench/<name>.json.
bench: build
	@mkdir -p $(BUILD_DIR)/bench
	@for b in $(BUILD_DIR)/bench/bin/*; do \
	  name=$$(basename $$b); \
	  echo "== $$name"; \
	  $$b --benchmark_out=$(BUILD_DIR)/bench/$$name.json --benchmark_out_format=json || exit 1; \
	done

clean:
	rm -rf $(BUILD_DIR)
