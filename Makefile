# fsdp.c top-level Makefile: thin wrapper over CMake + ctest.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: build run test test-asan bench clean deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).cmake.log 2>&1 || (cat $(BUILD).cmake.log; exit 1)
	@cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

run: build
	build/bin/fsdp-minimal

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 1

# The C unit tests under AddressSanitizer + UBSan, in a separate build tree.
test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFSDP_SANITIZE=ON -DFSDP_WERROR=ON > build-asan.cmake.log 2>&1 || (cat build-asan.cmake.log; exit 1)
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --output-on-failure -R '^test_' -E '_parity|bad_input'

bench: build
	@bench/run.sh

clean:
	rm -rf $(BUILD) $(BUILD).cmake.log build-asan build-asan.cmake.log
