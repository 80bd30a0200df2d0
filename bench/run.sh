#!/usr/bin/env bash
# bench/run.sh: fsdp.c training throughput vs PyTorch on this machine (`make bench`).
# See bench/README.md for what each number means.
#
# Environment knobs (all optional):
#   BENCH_CORETYPES="Haswell SkylakeX"  OPENBLAS_CORETYPE settings to run; the word `env` means
#                                       "as the environment has it". Default: `env`, plus
#                                       `Haswell` when OPENBLAS_CORETYPE is not set.
#   BENCH_GPT_STEPS=6                   fsdp-train --steps (its mean line averages steps 1..N-1)
#   BENCH_TORCH_STEPS=2 BENCH_TORCH_WARMUP=2   timed / warm-up steps of bench/torch_gpt.py
#   BENCH_SEED_STEPS=50                 steps of the seed-model runs (ours and PyTorch)
#   BENCH_TIMEOUT=300                   seconds allowed per run before it is killed
#   BUILD=build                         build folder (binaries in $BUILD/bin)
#   BENCH_PYTHON=/usr/bin/python3       the Python that has torch
set -uo pipefail

cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${BENCH_PYTHON:-/usr/bin/python3}   # Debian python3-torch; the pyenv python3 on PATH has no torch
OUT=$BUILD/bench
LOGS=$OUT/logs
GPT_STEPS=${BENCH_GPT_STEPS:-6}
TORCH_STEPS=${BENCH_TORCH_STEPS:-2}
TORCH_WARMUP=${BENCH_TORCH_WARMUP:-2}
SEED_STEPS=${BENCH_SEED_STEPS:-50}
TMO=${BENCH_TIMEOUT:-300}
mkdir -p "$LOGS"

# Benchmark model sizes (GPT-2 for fsdp-train / torch_gpt.py).
L=6 C=512 H=8 V=256 T=256 B=8
# Seed model (fsdp-minimal defaults / torch_seed.py).
SL=4 SC=128 SH=4 SF=2048 ST=8 SB=16

note() { echo "bench: $*" >&2; }
now() { date +%s.%N; }

# ---------------------------------------------------------------- builds
if [ ! -x "$BUILD/bin/fsdp-train" ] || [ ! -x "$BUILD/bin/fsdp-minimal" ]; then
  note "building fsdp.c into $BUILD"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j2 >/dev/null ||
    { note "build failed"; exit 1; }
fi
CEIL=$OUT/ceiling
if ! cc -O2 -march=native -fopenmp -Wall -I/usr/include/x86_64-linux-gnu/openblas-pthread \
     bench/ceiling.c -o "$CEIL" -lopenblas; then
  note "could not build bench/ceiling.c (needs libopenblas-dev and OpenMP); peak columns will be n/a"
  CEIL=
fi

HAVE_TORCH=0
if [ -x "$PY" ] && TORCH_VER=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  HAVE_TORCH=1
else
  note "PyTorch not found (needs Debian's python3-torch for $PY): PyTorch rows are skipped"
fi

# ---------------------------------------------------------------- FLOP model
# GPT-2, per optimizer step (forward + backward = 3 x forward; a forward matmul costs 2 FLOPs/MAC):
#   N    = non-embedding parameters = L * (12 C^2 + 13 C) + 2 C
#          (per block: qkv C*3C+3C, attn proj C*C+C, fc C*4C+4C, mlp proj 4C*C+C, two LayerNorms 2*2C;
#           plus the final LayerNorm; wte and wpe are not counted here)
#   FLOPs = 6 * N * B*T                         (all Linear / LayerNorm weights, fwd + bwd)
#         + L * 3 * 4 * B * T * T * C           (attention QK^T and PV over the full T x T square,
#                                                 2*B*T*T*C each in forward, x3 for fwd + bwd)
#         + 6 * B*T * C * V                     (LM head tied to wte, fwd + bwd)
# Seed model (post-LN TransformerEncoderLayer, FFN width F), same rules:
#   N    = L * (4 C^2 + 4 C + 2 C F + F + C + 4 C)
#   FLOPs = 6 * N * B*T + L * 12 * B * T * T * C
gpt_n=$(awk -v L=$L -v C=$C 'BEGIN{printf "%.0f", L*(12*C*C+13*C)+2*C}')
gpt_flops=$(awk -v N="$gpt_n" -v L=$L -v C=$C -v V=$V -v T=$T -v B=$B \
  'BEGIN{printf "%.0f", 6*N*B*T + L*12*B*T*T*C + 6*B*T*C*V}')
seed_n=$(awk -v L=$SL -v C=$SC -v F=$SF 'BEGIN{printf "%.0f", L*(4*C*C+4*C+2*C*F+F+C+4*C)}')
seed_flops=$(awk -v N="$seed_n" -v L=$SL -v C=$SC -v T=$ST -v B=$SB 'BEGIN{printf "%.0f", 6*N*B*T + L*12*B*T*T*C}')

# ---------------------------------------------------------------- settings
if [ -n "${BENCH_CORETYPES:-}" ]; then
  read -r -a SETTINGS <<<"$BENCH_CORETYPES"
elif [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  SETTINGS=(env)
else
  SETTINGS=(env Haswell)
fi
ENV_CT=${OPENBLAS_CORETYPE:-}

echo "== fsdp.c bench: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "   torch: $([ $HAVE_TORCH = 1 ] && echo "$TORCH_VER ($PY)" || echo 'not available')"
echo "   OPENBLAS_CORETYPE in the environment: ${ENV_CT:-(unset)}; settings run: ${SETTINGS[*]}"
echo "   GPT-2 L$L C$C H$H V$V T$T B$B: $gpt_n non-embedding params, $(awk -v f="$gpt_flops" 'BEGIN{printf "%.1f", f/1e9}') GFLOP/step"
echo "   seed  L$SL C$SC H$SH F$SF T$ST B$SB: $seed_n params, $(awk -v f="$seed_flops" 'BEGIN{printf "%.3f", f/1e9}') GFLOP/step"
echo "   raw logs: $LOGS"

# Runs "$@" under the current setting with a timeout, output to log $1; returns the command's status.
run_logged() {
  local log=$1; shift
  if [ "$CT" = env ]; then
    timeout "$TMO" "$@" >"$log" 2>&1
  else
    OPENBLAS_CORETYPE=$CT timeout "$TMO" "$@" >"$log" 2>&1
  fi
  local rc=$?
  [ $rc -eq 0 ] || note "$(basename "$log" .log): exit $rc (timeout is ${TMO}s; see $log)"
  return $rc
}
# Percent of all CPU time that was busy over the next second, before we start anything (other
# users of the machine make every number here slower; this says how much was going on).
cpu_busy() {
  local a b
  read -r -a a < <(head -1 /proc/stat); sleep 1; read -r -a b < <(head -1 /proc/stat)
  awk -v u=$(( (b[1]+b[2]+b[3]+b[6]+b[7]+b[8]) - (a[1]+a[2]+a[3]+a[6]+a[7]+a[8]) )) \
      -v i=$(( (b[4]+b[5]) - (a[4]+a[5]) )) 'BEGIN{printf "%.0f", (u + i > 0) ? 100 * u / (u + i) : 0}'
}
kv() { awk -v k="$1" '$1 == k {print $2; exit}' "$2"; }   # value of `key value` line in a log

# Table rows collected per setting: "label|ms|tok/s|flops|kind" (kind: ours-gpt, torch-gpt, ours-seed, torch-seed).
ROWS=()
add_row() { ROWS+=("$1|$2|$3|$4|$5"); }

print_table() {
  local peak=$1
  # Best PyTorch tokens/s per model, for the ours/PyTorch ratio.
  local best_gpt=0 best_seed=0 r label ms tps fl kind
  for r in "${ROWS[@]}"; do
    IFS='|' read -r label ms tps fl kind <<<"$r"
    [ "$kind" = torch-gpt ] && best_gpt=$(awk -v a="$best_gpt" -v b="$tps" 'BEGIN{print (b+0>a+0)?b:a}')
    [ "$kind" = torch-seed ] && best_seed=$(awk -v a="$best_seed" -v b="$tps" 'BEGIN{print (b+0>a+0)?b:a}')
  done
  local ours_gpt=0 ours_seed=0
  for r in "${ROWS[@]}"; do
    IFS='|' read -r label ms tps fl kind <<<"$r"
    [ "$kind" = ours-gpt ] && ours_gpt=$tps
    # the seed ratio uses the start-up-free (marginal) number of ours
    [ "$kind" = ours-seed ] && case $label in *marginal*) ours_seed=$tps ;; esac
  done
  printf '%-46s %10s %10s %9s %8s %10s\n' config ms/step tokens/s GFLOP/s %peak ours/torch
  printf '%s\n' "$(printf '%.0s-' {1..98})"
  for r in "${ROWS[@]}"; do
    IFS='|' read -r label ms tps fl kind <<<"$r"
    awk -v label="$label" -v ms="$ms" -v tps="$tps" -v fl="$fl" -v peak="$peak" -v kind="$kind" \
        -v bg="$best_gpt" -v bs="$best_seed" -v og="$ours_gpt" -v os="$ours_seed" 'BEGIN{
      if (ms == "" || ms + 0 <= 0) { printf "%-46s %10s\n", label, "failed"; exit }
      g = fl / (ms / 1000) / 1e9
      pk = (peak + 0 > 0) ? sprintf("%.1f%%", 100 * g / peak) : "n/a"
      # ours rows: ours / best PyTorch; PyTorch rows: ours / this row
      if (kind == "ours-gpt")        rt = (bg > 0) ? sprintf("%.2f best", tps / bg) : "n/a"
      else if (kind == "ours-seed")  rt = (bs > 0 && label ~ /marginal/) ? sprintf("%.2f best", tps / bs) : ""
      else if (kind == "torch-gpt")  rt = (og > 0) ? sprintf("%.2f", og / tps) : "n/a"
      else                           rt = (os > 0) ? sprintf("%.2f", os / tps) : "n/a"
      printf "%-46s %10.1f %10.1f %9.1f %8s %10s\n", label, ms, tps, g, pk, rt }'
  done
}

# ---------------------------------------------------------------- ceilings
# All ceiling runs come first. The FMA peak does not depend on the setting (OpenBLAS SGEMM does), so
# the %peak columns of every table use the best 2-thread FMA peak over all of them.
peak=0
for CT in "${SETTINGS[@]}"; do
  if [ -n "$CEIL" ] && run_logged "$LOGS/$CT-ceiling.log" "$CEIL"; then
    peak=$(awk -v a="$peak" -v b="$(kv fma_peak_gflops_2t "$LOGS/$CT-ceiling.log")" 'BEGIN{print (b+0>a+0)?b:a}')
  fi
done

# ---------------------------------------------------------------- runs
for CT in "${SETTINGS[@]}"; do
  ROWS=()
  tag=$CT
  echo
  corename=?
  [ -s "$LOGS/$tag-ceiling.log" ] && corename=$(kv openblas_corename "$LOGS/$tag-ceiling.log")
  if [ "$CT" = env ]; then
    desc="as in the environment (OPENBLAS_CORETYPE=${ENV_CT:-unset}; OpenBLAS uses $corename)"
  else
    desc="OPENBLAS_CORETYPE=$CT (OpenBLAS uses $corename)"
  fi
  echo "== setting: $desc"
  busy=$(cpu_busy)
  echo "   machine busy before the training runs: $busy% of all CPU over 1 s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  [ "$busy" -ge 20 ] && echo "   WARNING: something else is using the CPU; the numbers below are pessimistic and noisy"
  [ -n "$CEIL" ] && [ -s "$LOGS/$tag-ceiling.log" ] && sed -n 's/^\(fma_\|sgemm_\)/   &/p' "$LOGS/$tag-ceiling.log"

  # ours, GPT-2
  ms=
  if run_logged "$LOGS/$tag-ours-gpt.log" env OMP_NUM_THREADS=2 "$BUILD/bin/fsdp-train" \
       --layers $L --d-model $C --heads $H --vocab $V --seq $T --batch $B --steps "$GPT_STEPS"; then
    ms=$(sed -n 's/^mean (steps [0-9.]*): \([0-9.]*\) ms\/step.*/\1/p' "$LOGS/$tag-ours-gpt.log")
  fi
  add_row "ours gpt2, 2 threads (mean steps 1..$((GPT_STEPS - 1)))" "$ms" \
    "$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN{if (ms > 0) printf "%.1f", n * 1000 / ms}')" "$gpt_flops" ours-gpt

  # PyTorch, GPT-2
  if [ $HAVE_TORCH = 1 ]; then
    for mode in 1 2 ddp; do
      if [ $mode = ddp ]; then flags=(--ddp); label="torch gpt2, DDP 2 ranks x 1 thread (gloo)"
      else flags=(--threads $mode); label="torch gpt2, $mode thread(s)"; fi
      log=$LOGS/$tag-torch-gpt-$mode.log
      ms= tps=
      if run_logged "$log" "$PY" bench/torch_gpt.py --layers $L --d-model $C --heads $H --vocab $V \
           --seq $T --batch $B --steps "$TORCH_STEPS" --warmup "$TORCH_WARMUP" "${flags[@]}"; then
        ms=$(kv ms_per_step "$log") tps=$(kv tokens_per_s "$log")
      fi
      add_row "$label" "$ms" "$tps" "$gpt_flops" torch-gpt
    done
  fi

  # ours, seed model: fsdp-minimal prints only `step K loss L`, so the whole process is timed.
  # Two rows: whole process / steps (includes start-up: init, thread pool), and the marginal
  # cost per step = (t(steps) - t(0 steps)) / steps, which leaves start-up out.
  t_all= t_zero=
  s=$(now)
  if run_logged "$LOGS/$tag-ours-seed.log" env OMP_NUM_THREADS=2 "$BUILD/bin/fsdp-minimal" --steps "$SEED_STEPS"; then
    t_all=$(awk -v a="$s" -v b="$(now)" 'BEGIN{print b - a}')
  fi
  s=$(now)
  if run_logged "$LOGS/$tag-ours-seed0.log" env OMP_NUM_THREADS=2 "$BUILD/bin/fsdp-minimal" --steps 0; then
    t_zero=$(awk -v a="$s" -v b="$(now)" 'BEGIN{print b - a}')
  fi
  ms=$(awk -v t="$t_all" -v n="$SEED_STEPS" 'BEGIN{if (t > 0) printf "%.3f", t * 1000 / n}')
  add_row "ours seed, 2 threads (whole process / $SEED_STEPS)" "$ms" \
    "$(awk -v ms="$ms" -v n=$((SB * ST)) 'BEGIN{if (ms > 0) printf "%.1f", n * 1000 / ms}')" "$seed_flops" ours-seed
  ms=$(awk -v t="$t_all" -v z="$t_zero" -v n="$SEED_STEPS" 'BEGIN{if (t > 0 && z > 0 && t > z) printf "%.3f", (t - z) * 1000 / n}')
  add_row "ours seed, 2 threads (marginal, no start-up)" "$ms" \
    "$(awk -v ms="$ms" -v n=$((SB * ST)) 'BEGIN{if (ms > 0) printf "%.1f", n * 1000 / ms}')" "$seed_flops" ours-seed

  # PyTorch, seed model
  if [ $HAVE_TORCH = 1 ]; then
    for th in 1 2; do
      log=$LOGS/$tag-torch-seed-$th.log
      ms= tps=
      if run_logged "$log" "$PY" bench/torch_seed.py --steps "$SEED_STEPS" --threads $th; then
        ms=$(kv ms_per_step "$log") tps=$(kv tokens_per_s "$log")
      fi
      add_row "torch seed, $th thread(s)" "$ms" "$tps" "$seed_flops" torch-seed
    done
  fi

  echo
  print_table "$peak"
  echo "   (%peak: share of the 2-thread FMA peak ${peak} GFLOP/s, best over all settings; ours/torch: on ours rows ours / best PyTorch"
  echo "    tokens/s of that model, on PyTorch rows ours / that row)"
done
bash "$(dirname "$0")/fsdp_strategies.sh"
bash "$(dirname "$0")/ckpt_bench.sh"
bash "$(dirname "$0")/memory_bench.sh"
bash "$(dirname "$0")/precision.sh"
bash "$(dirname "$0")/launch.sh"
bash "$(dirname "$0")/deterministic.sh"
bash "$(dirname "$0")/finetune.sh"
bash "$(dirname "$0")/llama.sh"
bash "$(dirname "$0")/cpu_speed.sh"
bash "$(dirname "$0")/long_seq.sh"
