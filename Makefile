# exo: two commands do all set-up on a fresh machine.
#   make run    install dependencies if missing, build, start exo-node locally
#   make test   install dependencies if missing, build, run every test
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps configure build run test bench asan clean format

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
test: build
	@bash scripts/test-tools.sh >/dev/null
	cd $(BUILD) && XDG_RUNTIME_DIR=/tmp ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

bench: build
	cmake --build $(BUILD) --target bench_all

# Sanitizers slow everything 2-5x: the multi-process suites (label slow),
# whose failure detection is timed, run one at a time after the rest.
asan:
	$(MAKE) build BUILD=build-asan CMAKE_FLAGS="-DEXO_SANITIZE=ON -DEXO_BUILD_BENCH=OFF"
	cd build-asan && XDG_RUNTIME_DIR=/tmp ctest --output-on-failure -j $(JOBS) -LE slow
	cd build-asan && XDG_RUNTIME_DIR=/tmp ctest --output-on-failure -j 1 -L slow

format:
	git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD) build-asan
