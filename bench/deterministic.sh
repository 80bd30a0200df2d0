#!/usr/bin/env bash
# bench/deterministic.sh: the cost of --deterministic on the GPT benchmark model (6 layers, d_model 512,
# 8 heads, seq 256, vocab 256, 8 sequences per step), all in this run: tokens/s and peak memory per
# rank of the default mode against --deterministic with one sequence per chunk (8 chunks, the default)
# and with 2 chunks of 4 sequences, for one process x 2 threads and 2 ranks x 1 thread (FULL_SHARD),
# fp32 and bf16. The bits of the deterministic runs are compared as well (final weights, 1 vs 2 ranks).
# Knobs: BENCH_GPT_STEPS=5, BUILD=build.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${BENCH_GPT_STEPS:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256 --steps $STEPS --global-batch 8"

tps() { grep '^mean' "$1" | sed -E 's/.* ([0-9]+) tok\/s.*/\1/' | tail -1; }
peak() { grep '^mean' "$1" | sed -E 's/.*peak memory ([0-9.]+) MiB.*/\1/' | tail -1; }
row() {  # label, log, default-mode tok/s to compare with (or empty)
  local t; t=$(tps "$2")
  if [ -z "$t" ]; then printf '%-52s %s\n' "$1" "failed (see $2)"; return; fi
  local ratio="-"; [ -n "${3:-}" ] && ratio=$(awk -v a="$t" -v b="$3" 'BEGIN{printf "%.2fx", a/b}')
  printf '%-52s %10s %12s %12s\n' "$1" "$t" "$ratio" "$(peak "$2")"
}
run1() { OMP_NUM_THREADS=2 "$BUILD/bin/fsdp-train" $GPT "$@"; }
run2() { mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT "$@"; }

echo "== --deterministic on the GPT benchmark model, 8 sequences per step ($(date -u '+%F %T') UTC)"
echo "   CPU: $(lscpu | sed -n 's/^Model name: *//p')"
printf '%-52s %10s %12s %12s\n' "run" "tokens/s" "vs default" "peak MiB"
for prec in fp32 bf16; do
  for w in 1 2; do
    tag=det-$w-$prec
    run$w --mixed-precision $prec >"$LOGS/$tag-default.log" 2>&1
    run$w --mixed-precision $prec --deterministic --save "$LOGS/$tag-c8.safetensors" >"$LOGS/$tag-c8.log" 2>&1
    run$w --mixed-precision $prec --deterministic --det-chunks 2 >"$LOGS/$tag-c2.log" 2>&1
    base=$(tps "$LOGS/$tag-default.log")
    what=$([ $w = 1 ] && echo "1 process x 2 threads" || echo "2 ranks x 1 thread FULL_SHARD")
    row "$what, $prec, default" "$LOGS/$tag-default.log"
    row "$what, $prec, --deterministic (8 chunks of 1)" "$LOGS/$tag-c8.log" "$base"
    row "$what, $prec, --deterministic --det-chunks 2" "$LOGS/$tag-c2.log" "$base"
  done
  python3 - "$LOGS/det-1-$prec-c8.safetensors" "$LOGS/det-2-$prec-c8.safetensors" <<'PY'
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
print(f"   final weights, 1 process vs 2 ranks: {'bit-identical' if a == b and a else 'DIFFERENT'} ({len(a)} tensors)")
PY
done
