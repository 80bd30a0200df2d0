#!/usr/bin/env bash
# bench/cpu_speed.sh: the CPU-speed figures (issue #15), all in one run, beside PyTorch's:
#   - the machine's ceilings (bench/ceiling.c): fp32 FMA peak and, with avx512_bf16, the VDPBF16PS peak;
#   - GPT bench model (L6 C512 H8 V256 T256), 2 ranks x 1 thread, 8 sequences per rank: fp32 tokens/s,
#     GFLOP/s and share of the FMA peak; bf16 tokens/s, bf16/fp32 and share of the bf16 peak; the
#     accounted peak memory per rank in both;
#     PyTorch DDP (gloo, 2 ranks x 1 thread, the same 16 sequences per step), fp32;
#   - seed model (4 x TransformerEncoderLayer(128, 4), F 2048, T 8), 2 ranks x 1 thread, 16 sequences
#     per rank: ms/step against PyTorch on one thread with 16 sequences (the same work per core), and
#     the time its products alone would take at one core's FMA peak (the floor under any fp32 step);
#   - the GEMM rates as two one-thread processes see them at once (bench/gemm_pair.sh): fp32, bf16, ratio.
# Ours: best of 3 runs, fp32 and bf16 alternating (the VM's speed drifts by ~10% between runs).
# PyTorch: OPENBLAS_CORETYPE as in the environment and Haswell, the fastest kept. The seed model's runs
# alternate between the two.
# Knobs: BUILD=build, BENCH_PYTHON=/usr/bin/python3, BENCH_GPT_STEPS=6, BENCH_GPT_ROUNDS=3,
# BENCH_SEED_STEPS=100.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${BENCH_PYTHON:-/usr/bin/python3}
STEPS=${BENCH_GPT_STEPS:-6}
GPT_ROUNDS=${BENCH_GPT_ROUNDS:-3}
SEED_STEPS=${BENCH_SEED_STEPS:-100}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
L=6 C=512 H=8 V=256 T=256 B=8   # B per rank
GPT="--layers $L --d-model $C --heads $H --vocab $V --seq $T --batch $B --steps $STEPS"

# FLOPs per step over both ranks (bench/run.sh's model: 6 N BT + attention + LM head)
gpt_flops=$(awk -v L=$L -v C=$C -v V=$V -v T=$T -v B=$((2 * B)) \
  'BEGIN{N = L*(12*C*C+13*C)+2*C; printf "%.0f", 6*N*B*T + L*12*B*T*T*C + 6*B*T*C*V}')

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { case " $flags " in *" $1 "*) echo yes ;; *) echo no ;; esac; }
echo "== CPU speed (#15), $(date -u '+%F %T') UTC: $cpu, $(nproc) cores, avx512_bf16 $(has avx512_bf16), amx_bf16 $(has amx_bf16)"
echo "   OPENBLAS_CORETYPE in the environment: ${OPENBLAS_CORETYPE:-(unset)}"

CEIL=$BUILD/bench/ceiling
fma= bf16peak=
if cc -O2 -march=native -fopenmp -Wall -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/ceiling.c \
     -o "$CEIL" -lopenblas 2>/dev/null && "$CEIL" >"$LOGS/speed-ceiling.log" 2>&1; then
  fma=$(awk '$1 == "fma_peak_gflops_2t" {print $2}' "$LOGS/speed-ceiling.log")
  bf16peak=$(awk '$1 == "bf16_peak_gflops_2t" {print $2}' "$LOGS/speed-ceiling.log")
fi
echo "   fp32 FMA peak, 2 threads: ${fma:-n/a} GFLOP/s; bf16 (VDPBF16PS) peak, 2 threads: ${bf16peak:-n/a} GFLOP/s"

tps() { sed -n 's/^mean .* \([0-9][0-9]*\) tok\/s.*/\1/p' "$1" | tail -1; }
peak_mib() { sed -n 's/^mean .*peak memory \([0-9.]*\) MiB.*/\1/p' "$1" | tail -1; }  # accounted, per rank
# tag, round, flags...: tokens/s of one GPT run (empty if it failed)
gpt_run() {
  local tag=$1 r=$2; shift 2
  mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT "$@" >"$LOGS/speed-$tag-$r.log" 2>&1
  tps "$LOGS/speed-$tag-$r.log"
}
# best tokens/s of GPT_ROUNDS runs each, fp32 and bf16 alternating, so that the VM's drift between runs
# falls on both alike
f32= b16=
for r in $(seq "$GPT_ROUNDS"); do
  t=$(gpt_run fp32 "$r")
  [ -n "$t" ] && { [ -z "$f32" ] || [ "$t" -gt "$f32" ]; } && f32=$t
  t=$(gpt_run bf16 "$r" --mixed-precision bf16)
  [ -n "$t" ] && { [ -z "$b16" ] || [ "$t" -gt "$b16" ]; } && b16=$t
done

# tag, key, coretype (env: as in the environment), script and args: the value of `key` one PyTorch run
# printed (empty without torch or when the run failed)
torch_run() {
  local tag=$1 key=$2 ct=$3 log; shift 3
  "$PY" -c 'import torch' 2>/dev/null || return 0
  log=$LOGS/speed-torch-$tag-$ct.log
  if [ "$ct" = env ]; then "$PY" "$@" >"$log" 2>&1; else OPENBLAS_CORETYPE=$ct "$PY" "$@" >"$log" 2>&1; fi
  awk -v k="$key" '$1 == k {print $2}' "$log"
}
# a, b, max|min: a is better than b (or b is empty)
better() { awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN{exit !(b == "" || (m == "max" ? a > b : a < b))}'; }
# tag, key, max|min, script and args: the best value of `key` over the two OpenBLAS settings
torch_best() {
  local tag=$1 key=$2 m=$3 best= ct v; shift 3
  for ct in env Haswell; do
    v=$(torch_run "$tag" "$key" $ct "$@")
    [ -n "$v" ] && better "$v" "$best" "$m" && best=$v
  done
  echo "$best"
}
torch_gpt=$(torch_best ddp tokens_per_s max bench/torch_gpt.py --layers $L --d-model $C --heads $H --vocab $V \
  --seq $T --batch $((2 * B)) --steps 2 --warmup 2 --ddp)

gflops() { awk -v t="$1" -v f="$gpt_flops" -v n=$((2 * B * T)) 'BEGIN{if (t > 0) printf "%.1f", f / (n / t) * 1e-9}'; }
pct() { awk -v g="$1" -v p="$2" 'BEGIN{if (g > 0 && p > 0) printf "%.1f%%", 100 * g / p; else print "n/a"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a"}'; }
echo
printf '%-44s %12s %12s %12s %10s\n' "figure" "fsdp.c" "PyTorch" "ours/torch" "target"
g32=$(gflops "$f32"); g16=$(gflops "$b16")
printf '%-44s %12s %12s %12s %10s\n' "GPT fp32 tokens/s (2 ranks x 1 thread)" "${f32:-failed}" "${torch_gpt:-n/a}" \
  "$(ratio "$f32" "$torch_gpt")" "-"
printf '%-44s %12s %12s %12s %10s\n' "GPT fp32 GFLOP/s, share of FMA peak" "$g32 $(pct "$g32" "$fma")" "" "" ">= 75%"
printf '%-44s %12s %12s %12s %10s\n' "GPT bf16 tokens/s, bf16/fp32" "${b16:-failed} $(ratio "$b16" "$f32")" "" "" ">= 2.0x"
printf '%-44s %12s %12s %12s %10s\n' "GPT bf16 GFLOP/s, share of bf16 peak" "$g16 $(pct "$g16" "$bf16peak")" "" "" "-"
printf '%-44s %12s %12s %12s %10s\n' "GPT peak MiB per rank, fp32 / bf16" \
  "$(peak_mib "$LOGS/speed-fp32-1.log") / $(peak_mib "$LOGS/speed-bf16-1.log")" "" "" "-"

# seed model: fsdp-minimal's mean line (steps 1..N-1) against torch_seed.py on one thread, the two
# alternating (ours, PyTorch with the environment's OpenBLAS setting, ours, PyTorch with Haswell), so
# that neither side alone runs in the VM's wake of the PyTorch GPT runs above
seed= torch_seed=
for r in 1 2; do
  mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-minimal" --steps "$SEED_STEPS" >"$LOGS/speed-seed-$r.log" 2>&1
  ms=$(sed -n 's/^mean .*: \([0-9.]*\) ms\/step.*/\1/p' "$LOGS/speed-seed-$r.log")
  [ -n "$ms" ] && better "$ms" "$seed" min && seed=$ms
  ct=$([ $r = 1 ] && echo env || echo Haswell)
  v=$(torch_run seed ms_per_step "$ct" bench/torch_seed.py --steps "$SEED_STEPS" --threads 1)
  [ -n "$v" ] && better "$v" "$torch_seed" min && torch_seed=$v
done
printf '%-44s %12s %12s %12s %10s\n' "seed model ms/step (16 sequences per core)" "${seed:-failed}" "${torch_seed:-n/a}" \
  "$(ratio "$seed" "$torch_seed")" "<= 0.40x"
# The seed step's products on one core at its FMA peak: a floor no fp32 step reaches on this CPU (per
# token 2 (4 C^2 + 2 C F) + 4 T C forward per layer, x3 with backward, 16 x 8 tokens per core)
seed_gflop=$(awk 'BEGIN{L = 4; C = 128; F = 2048; T = 8; printf "%.4f", 3 * 16 * T * L * (2 * (4*C*C + 2*C*F) + 4*T*C) * 1e-9}')
floor_ms=$(awk -v g="$seed_gflop" -v p="$fma" 'BEGIN{if (p > 0) printf "%.2f", g / (p / 2) * 1e3}')
printf '%-44s %12s %12s %12s %10s\n' "seed model's products at the FMA peak, ms" "${floor_ms:-n/a}" "${torch_seed:-n/a}" \
  "$(ratio "$floor_ms" "$torch_seed")" "-"
seed_g=$(awk -v g="$seed_gflop" -v t="$seed" 'BEGIN{if (t > 0) printf "%.1f", g / t * 1e3}')
printf '%-44s %12s %12s %12s %10s\n' "seed model GFLOP/s per core, share of peak" "$seed_g $(pct "$seed_g" \
  "$(awk -v p="$fma" 'BEGIN{if (p > 0) print p / 2}')")" "" "" "-"
echo "   (logs: $LOGS/speed-*.log)"
echo
BUILD=$BUILD bash "$(dirname "$0")/gemm_pair.sh"
