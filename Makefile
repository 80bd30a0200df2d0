# fsdp.c top-level Makefile: thin wrapper over CMake + ctest.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: build run test bench clean deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).cmake.log 2>&1 || (cat $(BUILD).cmake.log; exit 1)
	@cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

run: build
	build/bin/fsdp-minimal

test: build
	@cd $(BUILD) && ctest --output-on-failure -j 1

bench: build
	@bench/run.sh

clean:
	rm -rf $(BUILD) $(BUILD).cmake.log
