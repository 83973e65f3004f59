# The two commands a new user needs: `make run` and `make test`.
# Everything else is CMake + Ninja under build/.

BUILD_DIR ?= build
TSAN_DIR ?= build-tsan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 10
# A fixed seed and a fresh corpus make the smoke run the same sequence of
# inputs on every machine: what passed here for longer passes in CI.
FUZZ_SEED ?= 1
BUILD_TYPE ?= Release
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
RUN_ARGS ?=
SOAK_MINUTES ?= 30
FLEET_NODES ?= 32
FLEET_TRIALS ?= 5

.PHONY: all bootstrap configure build run daemon package test test-unit test-integration test-tsan fuzz-smoke bench soak fleet clean

all: build

bootstrap:
	@scripts/bootstrap

configure: bootstrap
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The daemon in the foreground on the built-in simulator with the default
# configuration; `build/bin/rasctl status` answers from another shell.
# The fault demo: rasd on simulated devices, jobs, injected faults, a summary.
run: build
	$(BUILD_DIR)/bin/rasd-demo

# The Debian package: build/rasd_<version>_<arch>.deb.
package: build
	cd $(BUILD_DIR) && cpack -G DEB

# rasd itself in the foreground (Ctrl-C stops it).
# A development rasd that never collides with an installed one: its state,
# socket, metrics port and tracing instance are its own (RUN_ARGS may
# override any of them; the last flag wins).
DAEMON_DIR ?= $(BUILD_DIR)/daemon
daemon: build
	@mkdir -p $(DAEMON_DIR)
	@echo "rasd: state and socket in $(DAEMON_DIR); try: RASD_SOCKET=$(DAEMON_DIR)/rasd.sock $(BUILD_DIR)/bin/rasctl status"
	$(BUILD_DIR)/bin/rasd --state-dir $(DAEMON_DIR)/state --socket $(DAEMON_DIR)/rasd.sock \
	  --metrics-listen 127.0.0.1:9471 --tracefs-instance rasd-dev $(RUN_ARGS)

# The runtime and simulator tests run again under ThreadSanitizer, the
# decoders' fuzz targets run briefly, then every test, with ctest's summary last.
# Then why each skipped test skipped (ctest says only "***Skipped").
test: build test-tsan fuzz-smoke
	@rc=0; ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 300 || rc=$$?; \
	  scripts/skip-reasons $(BUILD_DIR) || true; exit $$rc

# Only the threaded libraries' tests: a full TSan build would double the
# build time for code that has no threads.
test-tsan: bootstrap
	@cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRASD_SANITIZE=thread \
	  -DRASD_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_DIR) -j $(JOBS) --target drivers_unit_tests runtime_unit_tests jobs_unit_tests
	TSAN_OPTIONS=halt_on_error=1 $(TSAN_DIR)/tests/drivers_unit_tests --gtest_brief=1
	TSAN_OPTIONS=halt_on_error=1 $(TSAN_DIR)/tests/runtime_unit_tests --gtest_brief=1
	TSAN_OPTIONS=halt_on_error=1 $(TSAN_DIR)/tests/jobs_unit_tests --gtest_brief=1

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

# rasd with both jobs under load and a fault every 5 s for SOAK_MINUTES;
# fails on a lost or wrong request, a checksum mismatch, rasd dying, or
# RSS, fds or threads that keep growing. Not part of `make test`.
soak: build
	$(BUILD_DIR)/tests/soak --minutes $(SOAK_MINUTES) --json $(BUILD_DIR)/soak.json

# A cluster on one machine: slurmctld, Prometheus with the packaged alert
# rules and FLEET_NODES real rasd processes; every node failing at once
# (FLEET_TRIALS times), a device fault on a few, a rolling restart, every
# node's nhc check at once. Writes build/fleet.json; stops all it started.
# As root; not part of `make test` (tests/fleet_test.cc is its small version).
fleet: build
	$(BUILD_DIR)/tests/fleet --nodes $(FLEET_NODES) --trials $(FLEET_TRIALS) --json $(BUILD_DIR)/fleet.json

# Each libFuzzer target for FUZZ_SECONDS, seeded with the real-record corpora
# (the held-out file stays out: it measures the decoders, it does not train them).
fuzz-smoke: bootstrap
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRASD_FUZZ=ON \
	  -DRASD_SANITIZE=address,undefined -DRASD_WERROR=OFF -DRASD_BUILD_TESTS=OFF -DRASD_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(FUZZ_DIR) -j $(JOBS) --target kernel_log_fuzz kmsg_stream_fuzz bert_fuzz tracefs_page_fuzz
	@rm -rf $(FUZZ_DIR)/seeds $(FUZZ_DIR)/found-* && mkdir -p $(FUZZ_DIR)/seeds
	@split -l 1 tests/data/kernel-ras-records.jsonl $(FUZZ_DIR)/seeds/record-
	@split -l 1 tests/data/public-records.jsonl $(FUZZ_DIR)/seeds/public-
	@for target in kernel_log_fuzz kmsg_stream_fuzz bert_fuzz tracefs_page_fuzz; do \
	  echo "== $$target ($(FUZZ_SECONDS) s)"; mkdir -p $(FUZZ_DIR)/found-$$target; \
	  UBSAN_OPTIONS=halt_on_error=1 $(FUZZ_DIR)/fuzz/$$target -max_total_time=$(FUZZ_SECONDS) -seed=$(FUZZ_SEED) -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_DIR)/ \
	    $(FUZZ_DIR)/found-$$target $(FUZZ_DIR)/seeds > $(FUZZ_DIR)/$$target.log 2>&1; rc=$$?; \
	  if [ $$rc -ne 0 ]; then tail -n 60 $(FUZZ_DIR)/$$target.log; exit 1; fi; \
	  tail -n 1 $(FUZZ_DIR)/$$target.log; \
	done

clean:
	rm -rf $(BUILD_DIR) $(TSAN_DIR) $(FUZZ_DIR)
