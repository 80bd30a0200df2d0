#!/bin/bash
# gpu-check.sh: the CUDA device checked on a GPU machine in one command (a few minutes on one H200).
#   scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: the tools and tests of a CUDA build (default: build a fresh one in build-cuda/); OUT_DIR
# (default out/gpu-check): summary.txt and one log per step. Steps:
#   1. the gpu-labelled tests: every CUDA kernel against the CPU kernel on the same inputs
#   2. fsdp-train on the GPU against the CPU, fp32 and bf16 (losses and gradient norms per step)
#   3. 2 ranks on the one GPU (collectives staged through host memory) against 1 rank
#   4. GPT-2 124M shapes in bf16 on the GPU: tokens/s and MFU against the H200's dense bf16 peak, and
#      PyTorch (eager, bf16 autocast) on the same GPU and shapes in the same run
#   5. with GPU_CHECK_NCU=1 and Nsight Compute there: one such step's GPU time by kernel
# Exit 0 when steps 1-3 pass. Each step has its own time limit, so a hang costs one step, not the run.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-}
out=${2:-$here/out/gpu-check}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

say "gpu-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"
if [ -z "$bin" ]; then
    cmake -S "$here" -B "$here/build-cuda" -DCMAKE_BUILD_TYPE=Release -DFSDP_CUDA=ON >"$out/build.log" 2>&1 &&
        cmake --build "$here/build-cuda" -j "$(nproc)" >>"$out/build.log" 2>&1 || { say "FAIL build (see build.log)"; exit 1; }
    bin=$here/build-cuda/bin
fi
# libraries a carried build lacks here (the machine's own first)
if ldd "$bin/fsdp-train" | grep -q "not found"; then
    [ -d "$here/.gpu/lib" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$here/.gpu/lib"
    ldd "$bin/fsdp-train" | grep "not found" | sed 's/^/missing library: /' | tee -a "$summary"
fi

fails=0
# 1. kernels
for t in "$bin"/test_cuda_*; do
    name=$(basename "$t")
    FSDP_CUDA_SYNC=1 timeout 300 "$t" >"$out/$name.log" 2>&1
    rc=$?
    n_ok=$(grep -c '^ok ' "$out/$name.log")
    n_fail=$(grep -c '^FAIL' "$out/$name.log")
    if [ $rc -eq 0 ]; then say "PASS $name ($n_ok checks)"; else say "FAIL $name rc=$rc ($n_ok ok, $n_fail failed)"; fails=$((fails + 1)); grep -m 12 -E 'FAIL|CHECK|error|cuda' "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"; fi
done

timeout 300 mpirun -np 2 --bind-to none "$bin/test_cuda_device" >"$out/test_cuda_device_np2.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then say "PASS test_cuda_device under mpirun -np 2"; else say "FAIL test_cuda_device under mpirun -np 2 rc=$rc"; fails=$((fails + 1)); grep -m 8 -E 'CHECK|error' "$out/test_cuda_device_np2.log" | sed 's/^/    /' | tee -a "$summary"; fi

# 2. and 3. training: the GPU against the CPU
train() {  # train LOG [mpirun -np N] ARGS...: fsdp-train with a small GPT and a JSON log
    local log=$1; shift
    local launch=()
    if [ "$1" = "-np" ]; then launch=(mpirun -np "$2" --bind-to none); shift 2; fi
    timeout 240 "${launch[@]}" "$bin/fsdp-train" --layers 3 --d-model 128 --heads 4 --seq 64 --steps 6 \
        --warmup 2 --lr 1e-3 --seed 7 --log-jsonl "$log" "$@" >"$log.out" 2>&1
}
compare() {  # compare NAME A.jsonl B.jsonl RTOL: loss and grad_norm of every step
    python3 "$here/scripts/gpu_compare_logs.py" "$2" "$3" "$4" >"$out/$1.cmp" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then say "PASS $1: $(tail -1 "$out/$1.cmp")"; else say "FAIL $1: $(tail -3 "$out/$1.cmp" | tr '\n' ' ')"; fails=$((fails + 1)); fi
}
train "$out/cpu_f32.jsonl" --device cpu --batch 4
train "$out/gpu_f32.jsonl" --device cuda --batch 4
compare train_fp32_gpu_vs_cpu "$out/cpu_f32.jsonl" "$out/gpu_f32.jsonl" 1e-4
train "$out/cpu_f32_drop.jsonl" --device cpu --batch 4 --dropout 0.1
train "$out/gpu_f32_drop.jsonl" --device cuda --batch 4 --dropout 0.1
compare train_fp32_dropout_gpu_vs_cpu "$out/cpu_f32_drop.jsonl" "$out/gpu_f32_drop.jsonl" 1e-4
train "$out/cpu_bf16.jsonl" --device cpu --batch 4 --mixed-precision bf16
train "$out/gpu_bf16.jsonl" --device cuda --batch 4 --mixed-precision bf16
compare train_bf16_gpu_vs_cpu "$out/cpu_bf16.jsonl" "$out/gpu_bf16.jsonl" 2e-2
train "$out/gpu_np2.jsonl" -np 2 --device cuda --batch 2
train "$out/gpu_np1.jsonl" --device cuda --batch 4
compare two_ranks_one_gpu_vs_one_rank "$out/gpu_np1.jsonl" "$out/gpu_np2.jsonl" 1e-5
for f in "$out"/*.jsonl.out; do grep -q -i -E "error|abort|fail" "$f" && { echo "== $f"; tail -5 "$f"; } >>"$out/errors.txt"; done

# 4. speed: GPT-2 124M shapes, bf16 (6N + 12 L T C FLOPs per token against 989 TFLOP/s dense bf16)
timeout 300 "$bin/fsdp-train" --device cuda --layers 12 --d-model 768 --heads 12 --seq 1024 --vocab 50257 --batch 8 \
    --steps 6 --warmup 1 --mixed-precision bf16 --log-jsonl "$out/gpt2_124m.jsonl" >"$out/gpt2_124m.out" 2>&1
python3 - "$out/gpt2_124m.jsonl" <<'EOF' | tee -a "$summary"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in recs if "step" in r and r["step"] >= 2]
if not steps:
    print("speed: no steps logged"); sys.exit(0)
tok = sum(r["tokens_per_s"] for r in steps) / len(steps)
L, C, T, V = 12, 768, 1024, 50257
N = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
flops = 6 * N + 12 * L * T * C
print(f"speed: GPT-2 124M bf16, 1 GPU: {tok:,.0f} tok/s, {tok * flops / 1e12:.1f} TFLOP/s, MFU {100 * tok * flops / 989e12:.1f}% of 989 TFLOP/s")
open(sys.argv[1] + ".tok", "w").write(f"{tok}\n")
EOF
# 4b. PyTorch on the same GPU, same shapes and precision (bf16 autocast), eager: attention written out
# (the same math) and F.scaled_dot_product_attention (flash attention); fsdp.c's tokens/s over each
for att in math sdpa; do
    timeout 300 python3 "$here/bench/torch_gpt.py" --device cuda --bf16 --attention $att --layers 12 --d-model 768 \
        --heads 12 --seq 1024 --vocab 50257 --batch 8 --warmup 2 --steps 5 >"$out/torch_$att.out" 2>&1
    python3 - "$out/gpt2_124m.jsonl.tok" "$out/torch_$att.out" "$att" <<'EOF' | tee -a "$summary"
import sys
try:
    ours = float(open(sys.argv[1]).read())
    theirs = [float(l.split()[1]) for l in open(sys.argv[2]) if l.startswith("tokens_per_s")][0]
    print(f"speed: PyTorch eager bf16, attention {sys.argv[3]}: {theirs:,.0f} tok/s; fsdp.c / PyTorch {ours / theirs:.2f}x")
except (OSError, IndexError, ValueError, ZeroDivisionError) as e:
    print(f"speed: PyTorch attention {sys.argv[3]}: no figure ({e.__class__.__name__}; see torch_{sys.argv[3]}.out)")
EOF
done
# 5. (GPU_CHECK_NCU=1) where one step's GPU time goes: every kernel of one GPT-2 124M bf16 step timed by
# Nsight Compute (one replay per kernel, clocks left alone), summed by kernel name. Informational.
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ "${GPU_CHECK_NCU:-0}" = 1 ] && [ -n "$ncu_bin" ]; then
    timeout 300 "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
        "$bin/fsdp-train" --device cuda --layers 12 --d-model 768 --heads 12 --seq 1024 --vocab 50257 --batch 8 \
        --steps 1 --mixed-precision bf16 >"$out/ncu_step.csv" 2>"$out/ncu_step.err"
    python3 "$here/scripts/gpu_kernel_times.py" "$out/ncu_step.csv" 2>&1 | tee -a "$summary"
fi
say "failures: $fails"
[ $fails -eq 0 ]
