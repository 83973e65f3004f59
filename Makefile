# The two commands a new user needs: `make run` and `make test`.
# Everything else is CMake + Ninja under build/.

BUILD_DIR ?= build
TSAN_DIR ?= build-tsan
BUILD_TYPE ?= Release
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RUN_ARGS ?=

.PHONY: all bootstrap configure build run test test-unit test-integration test-tsan bench clean

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

# The runtime and simulator tests run again under ThreadSanitizer first;
# then every test, with ctest's summary last.
test: build test-tsan
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 300

# Only the threaded libraries' tests: a full TSan build would double the
# build time for code that has no threads.
test-tsan: bootstrap
	@cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRASD_SANITIZE=thread \
	  -DRASD_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_DIR) -j $(JOBS) --target drivers_unit_tests runtime_unit_tests
	TSAN_OPTIONS=halt_on_error=1 $(TSAN_DIR)/tests/drivers_unit_tests --gtest_brief=1
	TSAN_OPTIONS=halt_on_error=1 $(TSAN_DIR)/tests/runtime_unit_tests --gtest_brief=1

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
	rm -rf $(BUILD_DIR) $(TSAN_DIR)
