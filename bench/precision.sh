#!/usr/bin/env bash
# bench/precision.sh: fp32 against bf16 mixed precision on the GPT benchmark model, all in this run:
# tokens/s and the bf16/fp32 ratio for one process x 2 threads and 2 ranks x 1 thread (FULL_SHARD, with
# bf16 and fp32 gradient reductions), bytes sent per step, peak memory per rank; PyTorch fp32 and
# bf16 autocast (one process, 2 threads) beside it; then the GEMM rates (bench/gemm_bench.c).
# Knobs: BENCH_GPT_STEPS=5, BUILD=build, BENCH_PYTHON=/usr/bin/python3, BENCH_CORETYPE (OPENBLAS_CORETYPE
#        for the PyTorch fp32 row; default as in the environment).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${BENCH_PYTHON:-/usr/bin/python3}
STEPS=${BENCH_GPT_STEPS:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
CT=${BENCH_CORETYPE:-${OPENBLAS_CORETYPE:-}}
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256 --steps $STEPS --summary"

tps() { grep '^mean' "$1" | sed -E 's/.* ([0-9]+) tok\/s.*/\1/' | tail -1; }
field() { grep '^memory rank 0' "$1" | sed -E "s/.*$2 ([0-9]+).*/\1/"; }
row() {  # label, log, fp32 tok/s to compare with (or empty)
  local t; t=$(tps "$2")
  if [ -z "$t" ]; then printf '%-46s %s\n' "$1" "failed (see $2)"; return; fi
  local ratio="-"; [ -n "${3:-}" ] && ratio=$(awk -v a="$t" -v b="$3" 'BEGIN{printf "%.2fx", a/b}')
  printf '%-46s %10s %9s %12.1f %14.1f\n' "$1" "$t" "$ratio" "$(field "$2" total_peak | awk '{print $1/1048576}')" \
    "$(field "$2" bytes_sent_per_step | awk '{print $1/1048576}')"
}

echo "== fp32 vs bf16 mixed precision, GPT 6L/512/8h, seq 256, 8 sequences per step ($(date -u '+%F %T') UTC)"
echo "   bf16 GEMM path: $(FSDP_GEMM_BF16= "$BUILD/bin/fsdp-train" --layers 1 --d-model 32 --heads 2 --seq 8 --vocab 256 \
  --steps 1 --summary --mixed-precision bf16 2>/dev/null | grep -o 'GEMM on [a-z]*')"
printf '%-46s %10s %9s %12s %14s\n' "run" "tokens/s" "vs fp32" "peak MiB" "sent MiB/step"
OMP_NUM_THREADS=2 "$BUILD/bin/fsdp-train" $GPT --batch 8 >"$LOGS/prec-1proc-fp32.log" 2>&1
OMP_NUM_THREADS=2 "$BUILD/bin/fsdp-train" $GPT --batch 8 --mixed-precision bf16 >"$LOGS/prec-1proc-bf16.log" 2>&1
base=$(tps "$LOGS/prec-1proc-fp32.log")
row "ours, 1 process x 2 threads, fp32" "$LOGS/prec-1proc-fp32.log"
row "ours, 1 process x 2 threads, bf16" "$LOGS/prec-1proc-bf16.log" "$base"
mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT --batch 4 >"$LOGS/prec-2r-fp32.log" 2>&1
mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT --batch 4 --mixed-precision bf16 >"$LOGS/prec-2r-bf16.log" 2>&1
mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT --batch 4 --mixed-precision bf16 --reduce-dtype fp32 \
  >"$LOGS/prec-2r-bf16-f32red.log" 2>&1
base2=$(tps "$LOGS/prec-2r-fp32.log")
row "ours, 2 ranks FULL_SHARD, fp32" "$LOGS/prec-2r-fp32.log"
row "ours, 2 ranks FULL_SHARD, bf16" "$LOGS/prec-2r-bf16.log" "$base2"
row "ours, 2 ranks FULL_SHARD, bf16, fp32 reduce" "$LOGS/prec-2r-bf16-f32red.log" "$base2"
for f in prec-1proc-bf16 prec-2r-bf16; do
  grep -q '^mean' "$LOGS/$f.log" && echo "   $f: $(grep '^mean' "$LOGS/$f.log" | sed 's/^mean/mean/')"
done

if "$PY" -c 'import torch' 2>/dev/null; then
  for prec in fp32 bf16; do
    flag=""; [ $prec = bf16 ] && flag="--bf16"
    if [ -n "$CT" ]; then
      OPENBLAS_CORETYPE=$CT "$PY" bench/torch_gpt.py --threads 2 --steps 2 $flag >"$LOGS/prec-torch-$prec.log" 2>&1
    else
      env -u OPENBLAS_CORETYPE "$PY" bench/torch_gpt.py --threads 2 --steps 2 $flag >"$LOGS/prec-torch-$prec.log" 2>&1
    fi
  done
  t32=$(awk '/^tokens_per_s/ {print $2}' "$LOGS/prec-torch-fp32.log")
  t16=$(awk '/^tokens_per_s/ {print $2}' "$LOGS/prec-torch-bf16.log")
  printf '%-46s %10s %9s\n' "PyTorch $("$PY" -c 'import torch; print(torch.__version__)'), 1 x 2 threads, fp32" "${t32:-n/a}" "-"
  printf '%-46s %10s %9s\n' "PyTorch, 1 x 2 threads, bf16 autocast" "${t16:-n/a}" \
    "$(awk -v a="${t16:-0}" -v b="${t32:-1}" 'BEGIN{printf "%.2fx", a/b}')"
  bf=$(tps "$LOGS/prec-1proc-bf16.log")
  echo "   ours bf16 / PyTorch bf16 autocast: $(awk -v a="${bf:-0}" -v b="${t16:-1}" 'BEGIN{printf "%.2fx", a/b}')"
fi

echo
echo "== GEMM rates on the benchmark model's shapes (2 threads)"
OMP_NUM_THREADS=2 "$BUILD/bin/gemm-bench"

echo
echo "== our bf16 GEMM against oneDNN's matmul (2 threads)"
if [ -x "$BUILD/bin/dnnl-bench" ]; then
  OMP_NUM_THREADS=2 "$BUILD/bin/dnnl-bench"
else
  echo "oneDNN not found at build time: apt-get install libdnnl-dev, then rebuild (cmake finds it) to compare"
fi
