# exo: two commands do all set-up on a fresh machine.
#   make run    install dependencies if missing, build, start exo-node locally
#   make test   install dependencies if missing, build, run every test
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps configure build run test bench soak asan fuzz fuzz-build fuzz-ci clean \
        format scenarios

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS); fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	bash scripts/run-default.sh $(BUILD)

# Test-only npm tools first (llama.cpp as the oracle, tokenizer files, ...):
# without the registry the tests that need them are reported skipped.
# Then every fuzz target for FUZZ_CI_SECONDS (10 s each, about a minute in
# all) in the clang build: ctest replays the corpora, this looks for more.
test: build
	@bash scripts/test-tools.sh >/dev/null
	cd $(BUILD) && XDG_RUNTIME_DIR=/tmp ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)
	@$(MAKE) --no-print-directory fuzz-ci

bench: build
	cmake --build $(BUILD) --target bench_all

# Issue 21's soak (not in CI): 30 minutes (SOAK_MINUTES) of jobs through
# random kills, freezes and restarts of 4 local nodes; its Markdown report
# goes to $(BUILD)/soak-report.md.
SOAK_MINUTES ?= 30
soak: build
	@bash scripts/test-tools.sh >/dev/null
	EXO_SOAK_MINUTES=$(SOAK_MINUTES) EXO_SOAK_REPORT=$(abspath $(BUILD))/soak-report.md \
	  cmake --build $(BUILD) --target soak

# Every scenario in scenarios/, one after the other (the namespaced ones need
# root; without it they report SKIPPED). REPORTS=DIR keeps a JSON report of
# each (exo-scenario run --report).
REPORTS ?=
scenarios: build
	@failed=0; for f in scenarios/*.json; do \
	  n=$$(basename $$f .json); \
	  rep=""; \
	  if [ -n "$(REPORTS)" ]; then \
	    mkdir -p $(REPORTS); rep="--report $(REPORTS)/$$n.json"; fi; \
	  out=$$(mktemp); \
	  XDG_RUNTIME_DIR=/tmp $(BUILD)/runtime/scenario/exo-scenario run $$f $$rep \
	    >$$out 2>&1; rc=$$?; \
	  grep -E "^scenario [^ ]+: (PASS|FAIL|SKIPPED)" $$out || tail -1 $$out; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 77 ]; then failed=1; tail -30 $$out; fi; \
	  rm -f $$out; \
	done; exit $$failed

# Sanitizers slow everything 2-5x: the multi-process suites (label slow),
# whose failure detection is timed, run one at a time after the rest.
asan:
	$(MAKE) build BUILD=build-asan CMAKE_FLAGS="-DEXO_SANITIZE=ON -DEXO_BUILD_BENCH=OFF"
	cd build-asan && XDG_RUNTIME_DIR=/tmp ctest --output-on-failure -j $(JOBS) -LE slow
	cd build-asan && XDG_RUNTIME_DIR=/tmp ctest --output-on-failure -j 1 -L slow

# libFuzzer (clang) over every parser of untrusted bytes (fuzz/): a build of
# its own, FUZZ_SECONDS per target over a working copy of fuzz/corpus.
FUZZ_SECONDS ?= 600
FUZZ_CI_SECONDS ?= 10
fuzz-build: deps
	@if [ ! -f build-fuzz/build.ninja ]; then \
	  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang \
	    -DCMAKE_CXX_COMPILER=clang++ -DEXO_FUZZ=ON -DEXO_BUILD_TESTS=OFF \
	    -DEXO_BUILD_BENCH=OFF -DEXO_WITH_VULKAN=OFF -DEXO_WITH_CUDA=OFF \
	    -DEXO_WITH_HIP=OFF \
	    "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer" \
	    "-DCMAKE_C_FLAGS=-fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer"; fi
	cmake --build build-fuzz --target fuzz_all -j $(JOBS)

fuzz: fuzz-build
	bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

fuzz-ci: fuzz-build
	bash scripts/fuzz.sh build-fuzz $(FUZZ_CI_SECONDS)

format:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan build-fuzz
