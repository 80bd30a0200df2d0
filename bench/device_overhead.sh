#!/usr/bin/env bash
# bench/device_overhead.sh: the cost of the device layer, measured before and after in one run.
#
#   bench/device_overhead.sh BEFORE_BIN AFTER_BIN [ROUNDS]
#
# BEFORE_BIN and AFTER_BIN are two builds' bin/ folders (e.g. a worktree of the commit before the device
# layer, and build/bin). Each configuration runs alternately on both builds, ROUNDS times (default 3),
# and the best of each is kept (the least disturbed run). Rows: the GPT bench model (6 layers, d_model
# 512, seq 256, batch 8; as bench/run.sh) in fp32 and bf16 on 1 process x 2 threads and on 2 ranks x 1
# thread, and the seed model (fsdp-minimal defaults) on 2 ranks. Ratio = after / before of tokens/s (GPT)
# or before / after of ms per step (seed): above 0.97 is within the 3% rule. The losses both builds
# print must be the same bits; a row says "DIFFERENT LOSSES" otherwise. BENCH_ONLY=PREFIX runs only
# the rows whose configuration starts with PREFIX (e.g. "seed", "gpt bf16").
set -uo pipefail
BEFORE=${1:?usage: bench/device_overhead.sh BEFORE_BIN AFTER_BIN [ROUNDS]}
AFTER=${2:?usage: bench/device_overhead.sh BEFORE_BIN AFTER_BIN [ROUNDS]}
ROUNDS=${3:-3}
STEPS=${BENCH_GPT_STEPS:-6}
SEED_STEPS=${BENCH_SEED_STEPS:-60}
MPIRUN=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --bind-to core -np 2)
TMP=$(mktemp -d)
[ -n "${BENCH_KEEP:-}" ] && echo "logs: $TMP"
[ -n "${BENCH_KEEP:-}" ] || trap 'rm -rf "$TMP"' EXIT
GPT=(--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256 --batch 8 --steps "$STEPS")

# run LOG CMD...: the command's output in LOG; 1 if it failed
run() { local log=$1; shift; "$@" > "$log" 2>&1; }
gpt_tps() { sed -n 's/^mean (steps [0-9.]*): [0-9.]* ms\/step, \([0-9.]*\) tok\/s.*/\1/p' "$1"; }
losses() { grep -oE '"loss": ?[-0-9.e]+|loss [-0-9.e]+' "$1" | head -50; }

echo "device layer overhead: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "before: $BEFORE"
echo "after:  $AFTER"
printf '%-34s %14s %14s %8s %s\n' configuration before after ratio losses
for cfg in "gpt fp32 1x2" "gpt bf16 1x2" "gpt fp32 2x1" "gpt bf16 2x1" "seed fp32 2x1"; do
  [[ $cfg == ${BENCH_ONLY:-}* ]] || continue  # BENCH_ONLY="seed" runs the rows starting with it
  set -- $cfg
  model=$1 prec=$2 shape=$3
  best_b=0 best_a=0 same=yes
  for r in $(seq "$ROUNDS"); do
    for side in before after; do
      bin=$BEFORE; [ $side = after ] && bin=$AFTER
      log=$TMP/$model-$prec-$shape-$side-$r.log
      if [ "$model" = gpt ]; then
        flags=("${GPT[@]}" --mixed-precision "$prec" --log-jsonl "$TMP/$side.jsonl")
        rm -f "$TMP/$side.jsonl"
        if [ "$shape" = 1x2 ]; then run "$log" env OMP_NUM_THREADS=2 "$bin/fsdp-train" "${flags[@]}" --threads 2
        else run "$log" env OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$bin/fsdp-train" "${flags[@]}" --threads 1; fi
        v=$(gpt_tps "$log")
        cp "$TMP/$side.jsonl" "$TMP/$side-losses.txt" 2>/dev/null
        losses "$TMP/$side.jsonl" > "$TMP/$side-l.txt" 2>/dev/null
      else
        s=$(date +%s.%N)
        batch=(--global-batch 16)  # builds from before --global-batch took --batch as the global batch
        help=$("$bin/fsdp-minimal" --help 2>&1)
        [[ $help == *--global-batch* ]] || batch=(--batch 16)
        run "$log" env OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$bin/fsdp-minimal" "${batch[@]}" --steps "$SEED_STEPS" --threads 1
        v=$(awk -v a="$s" -v b="$(date +%s.%N)" -v n="$SEED_STEPS" 'BEGIN{printf "%.3f", (b - a) * 1000 / n}')
        losses "$log" > "$TMP/$side-l.txt"
      fi
      [ -n "$v" ] || { echo "$cfg: $side run failed (log $log):"; tail -5 "$log"; v=0; }
      if [ "$model" = gpt ]; then  # tokens/s: higher is better
        if [ $side = before ]; then awk -v v="$v" -v b="$best_b" 'BEGIN{exit !(v > b)}' && best_b=$v
        else awk -v v="$v" -v b="$best_a" 'BEGIN{exit !(v > b)}' && best_a=$v; fi
      else  # ms per step (whole process): lower is better
        if [ $side = before ]; then awk -v v="$v" -v b="$best_b" 'BEGIN{exit !(b == 0 || v < b)}' && best_b=$v
        else awk -v v="$v" -v b="$best_a" 'BEGIN{exit !(b == 0 || v < b)}' && best_a=$v; fi
      fi
    done
    cmp -s "$TMP/before-l.txt" "$TMP/after-l.txt" && [ -s "$TMP/after-l.txt" ] || same="DIFFERENT LOSSES"
  done
  if [ "$model" = gpt ]; then
    ratio=$(awk -v a="$best_a" -v b="$best_b" 'BEGIN{if (b > 0) printf "%.3f", a / b; else print "n/a"}')
    printf '%-34s %10s tok/s %8s tok/s %8s %s\n' "$cfg" "$best_b" "$best_a" "$ratio" "$same"
  else
    ratio=$(awk -v a="$best_a" -v b="$best_b" 'BEGIN{if (a > 0) printf "%.3f", b / a; else print "n/a"}')
    printf '%-34s %10s ms/st %8s ms/st %8s %s\n' "$cfg" "$best_b" "$best_a" "$ratio" "$same"
  fi
done
