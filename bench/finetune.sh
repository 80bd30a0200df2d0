#!/usr/bin/env bash
# bench/finetune.sh: fine-tuning against full training, all in this run, 2 ranks x 1 thread FULL_SHARD,
# fp32: tokens/s, peak accounted memory per rank, gradient + AdamW bytes per rank and bytes sent per
# step, for full training, half the blocks frozen (--freeze), and LoRA (rank 8 on c_attn, and on every
# projection), on the GPT benchmark model (6 layers, d_model 512, seq 256, vocab 256) and on GPT-2
# 124M shapes (12 layers, d_model 768, 12 heads, vocab 50257, seq 256), 8 sequences per step.
# Knobs: BENCH_GPT_STEPS=5, BENCH_124M_STEPS=4, BUILD=build.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${BENCH_GPT_STEPS:-5}
STEPS_124M=${BENCH_124M_STEPS:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"

tps() { grep '^mean' "$1" | sed -E 's/.* ([0-9]+) tok\/s.*/\1/' | tail -1; }
peak() { grep '^mean' "$1" | sed -E 's/.*peak memory ([0-9.]+) MiB.*/\1/' | tail -1; }
mem() { grep '^memory rank 0:' "$1" | sed -E "s/.* $2 ([0-9]+).*/\1/" | tail -1; }
row() {  # label, log, full-training tok/s
  local t; t=$(tps "$2")
  if [ -z "$t" ]; then printf '%-44s %s\n' "$1" "failed (see $2)"; return; fi
  local ratio; ratio=$(awk -v a="$t" -v b="${3:-$t}" 'BEGIN{printf "%.2fx", a/b}')
  local go; go=$(awk -v g="$(mem "$2" gradients)" -v o="$(mem "$2" optimizer)" 'BEGIN{printf "%.1f", (g+o)/1048576}')
  local sent; sent=$(awk -v s="$(mem "$2" bytes_sent_per_step)" 'BEGIN{printf "%.1f", s/1048576}')
  printf '%-44s %9s %8s %10s %12s %12s\n' "$1" "$t" "$ratio" "$(peak "$2")" "$go" "$sent"
}
run2() { mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" "$@" --threads 1 --summary; }

echo "== fine-tuning: frozen parameters and LoRA against full training, 2 ranks x 1 thread FULL_SHARD, fp32 ($(date -u '+%F %T') UTC)"
echo "   CPU: $(lscpu | sed -n 's/^Model name: *//p')"
for model in gpt 124m; do
  if [ $model = gpt ]; then
    M="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256 --global-batch 8 --steps $STEPS"
    half="h.[0-2].*"; echo "-- GPT benchmark model (6 layers, d_model 512, seq 256, vocab 256, 19M parameters)"
  else
    M="--layers 12 --d-model 768 --heads 12 --vocab 50257 --seq 256 --global-batch 8 --steps $STEPS_124M"
    half="h.[0-5].*"; echo "-- GPT-2 124M shapes (12 layers, d_model 768, vocab 50257, seq 256)"
  fi
  printf '%-44s %9s %8s %10s %12s %12s\n' "run" "tokens/s" "vs full" "peak MiB" "grad+AdamW MiB" "sent MiB/step"
  run2 $M >"$LOGS/ft-$model-full.log" 2>&1
  run2 $M --freeze "$half" --freeze wte.weight --freeze wpe.weight >"$LOGS/ft-$model-half.log" 2>&1
  run2 $M --lora-rank 8 --lora-targets c_attn >"$LOGS/ft-$model-lora-attn.log" 2>&1
  run2 $M --lora-rank 8 --lora-targets c_attn,c_proj,c_fc >"$LOGS/ft-$model-lora-all.log" 2>&1
  base=$(tps "$LOGS/ft-$model-full.log")
  row "full training" "$LOGS/ft-$model-full.log"
  row "--freeze half the blocks + embeddings" "$LOGS/ft-$model-half.log" "$base"
  row "LoRA r 8 on c_attn" "$LOGS/ft-$model-lora-attn.log" "$base"
  row "LoRA r 8 on c_attn, c_proj, c_fc" "$LOGS/ft-$model-lora-all.log" "$base"
done
