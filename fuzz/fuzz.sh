#!/usr/bin/env bash
# fuzz/fuzz.sh: builds the libFuzzer harnesses (fuzz/CMakeLists.txt, clang) and runs them.
#   fuzz/fuzz.sh build DIR              configure and build the harnesses in DIR
#   fuzz/fuzz.sh run DIR TARGET SECONDS build, then fuzz TARGET for SECONDS starting from the seeds in
#                                       fuzz/corpus/TARGET (new inputs go to DIR/corpus/TARGET, crashing
#                                       inputs to DIR/artifacts/); prints the executions run
#   fuzz/fuzz.sh all DIR SECONDS        run every target in turn
# Targets: safetensors ckpt_marker data_bin cli_flags tokenizer_json. Exits 77 (ctest's "skipped") when
# no clang with libFuzzer is found (Debian: clang-14 libclang-rt-14-dev; FUZZ_CC overrides the compiler).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
targets=(safetensors ckpt_marker data_bin cli_flags tokenizer_json)
mode="${1:-}" dir="${2:-}"
[ -n "$mode" ] && [ -n "$dir" ] || { sed -n '2,9p' "$0" >&2; exit 2; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

# The first compiler that links a fuzzer with ASan and UBSan, or nothing.
find_cc() {
  local cc
  for cc in ${FUZZ_CC:-clang-14 clang}; do
    command -v "$cc" >/dev/null || continue
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n); int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' \
      > "$dir/probe.c"
    if "$cc" -fsanitize=fuzzer,address,undefined "$dir/probe.c" -o "$dir/probe" 2>/dev/null; then
      echo "$cc"
      return
    fi
  done
}

build() {
  local cc
  cc="$(find_cc)"
  if [ -z "$cc" ]; then
    echo "fuzz tests skipped: no clang with libFuzzer (install clang-14 libclang-rt-14-dev)"
    exit 77
  fi
  # one build at a time (ctest may start several fuzz tests)
  (
    flock 9
    if [ ! -f "$dir/CMakeCache.txt" ]; then
      cmake -S "$here" -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=None > "$dir/cmake.log" 2>&1 \
        || { cat "$dir/cmake.log"; exit 1; }
    fi
    cmake --build "$dir" -j "$(nproc)" > "$dir/build.log" 2>&1 || { cat "$dir/build.log"; exit 1; }
  ) 9> "$dir/.lock"
}

run() {
  local t="$1" secs="$2" log extra=()
  [ -x "$dir/bin/fuzz_$t" ] || { echo "unknown fuzz target '$t' (one of: ${targets[*]})" >&2; exit 2; }
  mkdir -p "$dir/corpus/$t" "$dir/artifacts"
  [ -f "$here/$t.dict" ] && extra+=("-dict=$here/$t.dict")
  # the flag parser prints --help and error lines: silence them (crashes are still reported)
  [ "$t" = cli_flags ] && extra+=("-close_fd_mask=3")
  log="$dir/$t.log"
  if ! "$dir/bin/fuzz_$t" "$dir/corpus/$t" "$here/corpus/$t" "${extra[@]}" -max_total_time="$secs" \
      -max_len=4096 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$dir/artifacts/$t-" > "$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz_$t: FAILED (input saved under $dir/artifacts/; log $log)"
    exit 1
  fi
  local execs
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  echo "fuzz_$t: ${execs:-?} executions in ${secs} s, no crash, leak or undefined behaviour"
  printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$secs" "${execs:-?}" >> "$dir/executions.tsv"
}

case "$mode" in
  build) build ;;
  run) build; run "${3:?target}" "${4:?seconds}" ;;
  all) build; for t in "${targets[@]}"; do run "$t" "${3:?seconds}"; done ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
