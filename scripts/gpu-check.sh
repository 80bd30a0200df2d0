#!/bin/bash
# gpu-check.sh: the CUDA device checked on a GPU machine in one command (a few minutes on one H200).
#   scripts/gpu-check.sh [BIN_DIR] [OUT_DIR]
# BIN_DIR: the tools and tests of a CUDA build (default: build a fresh one in build-cuda/); OUT_DIR
# (default out/gpu-check): summary.txt and one log per step. Steps:
#   1. the gpu-labelled tests: every CUDA kernel against the CPU kernel on the same inputs
#   2. fsdp-train on the GPU against the CPU, fp32 and bf16 (losses and gradient norms per step), GPT-2
#      and the Llama family
#   3. 2 ranks on the one GPU (collectives staged through host memory) against 1 rank
#   N. NCCL (--comm nccl; docs/cuda.md, "NCCL"): the library loaded and its version; test_cuda_nccl on 2
#      ranks (one GPU: the "share GPU" error, then a NCCL_HOSTID per rank); 1 rank through NCCL against
#      the staged path, the saved weights byte for byte (fp32, bf16, hybrid_shard); --comm nccl with 2 ranks on one
#      GPU a one-line error; 2 ranks (full_shard, shard_grad_op, no_shard) and 4 (hybrid_shard 2x2) on
#      the one GPU with a NCCL_HOSTID each against 1 rank (NCCL may refuse: then it says so, not a failure);
#      GPT-2 124M bf16 through 1-rank NCCL against the same run staged (no collectives): tokens/s ratio
#   4. GPT-2 124M shapes in bf16 on the GPU: tokens/s and MFU against the H200's dense bf16 peak, and
#      PyTorch (eager, bf16 autocast) on the same GPU and shapes in the same run
#   5. with GPU_CHECK_NCU=1 and Nsight Compute there: one such step's GPU time by kernel
# GPU_CHECK_STEPS (default all): a comma-separated subset of kernels, train, nccl, speed (e.g. nccl alone:
# test_cuda_nccl and step N, a few minutes). NCCL is not carried (libnccl.so.2 is 210 MB): the machine's
# own is used, the loader's or, failing that, PyTorch's wheel (nvidia-nccl-cu13), through
# FSDP_NCCL_LIBRARY; a fresh build there finds its header through NCCL_ROOT.
# Exit 0 when steps 1-3 and N pass. Each step has its own time limit, so a hang costs one step, not the run.
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
want() { [ "${GPU_CHECK_STEPS:-all}" = all ] || [[ ",$GPU_CHECK_STEPS," == *",$1,"* ]]; }
# NCCL: the loader's libnccl.so.2, else PyTorch's wheel (nvidia/nccl/lib), named by FSDP_NCCL_LIBRARY
if [ -z "${FSDP_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
    wheel=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
    if [ -n "$wheel" ] && [ -f "$wheel/lib/libnccl.so.2" ]; then export FSDP_NCCL_LIBRARY=$wheel/lib/libnccl.so.2 NCCL_ROOT=$wheel; fi
fi

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
# 1. kernels (and test_cuda_nccl with 1 rank: NCCL against the staged path)
for t in "$bin"/test_cuda_*; do
    case $(basename "$t") in test_cuda_nccl) want nccl || want kernels || continue ;; *) want kernels || continue ;; esac
    name=$(basename "$t")
    FSDP_CUDA_SYNC=1 timeout 300 "$t" >"$out/$name.log" 2>&1
    rc=$?
    n_ok=$(grep -c '^ok ' "$out/$name.log")
    n_fail=$(grep -c '^FAIL' "$out/$name.log")
    if [ $rc -eq 0 ]; then say "PASS $name ($n_ok checks)"; else say "FAIL $name rc=$rc ($n_ok ok, $n_fail failed)"; fails=$((fails + 1)); grep -m 12 -E 'FAIL|CHECK|error|cuda' "$out/$name.log" | sed 's/^/    /' | tee -a "$summary"; fi
done

np2_test() {  # np2_test NAME: the test binary under mpirun -np 2 (two ranks on the one GPU)
    timeout 300 mpirun -np 2 --bind-to none "$bin/$1" >"$out/$1_np2.log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then say "PASS $1 under mpirun -np 2"; else say "FAIL $1 under mpirun -np 2 rc=$rc"; fails=$((fails + 1)); grep -m 8 -E 'CHECK|FAIL|error' "$out/$1_np2.log" | sed 's/^/    /' | tee -a "$summary"; fi
}
if want kernels; then np2_test test_cuda_device; fi

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
if want train; then
train "$out/cpu_f32.jsonl" --device cpu --batch 4
train "$out/gpu_f32.jsonl" --device cuda --batch 4
compare train_fp32_gpu_vs_cpu "$out/cpu_f32.jsonl" "$out/gpu_f32.jsonl" 1e-4
train "$out/cpu_f32_drop.jsonl" --device cpu --batch 4 --dropout 0.1
train "$out/gpu_f32_drop.jsonl" --device cuda --batch 4 --dropout 0.1
compare train_fp32_dropout_gpu_vs_cpu "$out/cpu_f32_drop.jsonl" "$out/gpu_f32_drop.jsonl" 1e-4
train "$out/cpu_bf16.jsonl" --device cpu --batch 4 --mixed-precision bf16
train "$out/gpu_bf16.jsonl" --device cuda --batch 4 --mixed-precision bf16
compare train_bf16_gpu_vs_cpu "$out/cpu_bf16.jsonl" "$out/gpu_bf16.jsonl" 2e-2
# the Llama family (rmsnorm, rope, swiglu, grouped-query planar attention on the GPU)
LLAMA=(--arch llama --kv-heads 2 --d-ff 192)
train "$out/cpu_llama_f32.jsonl" --device cpu --batch 4 "${LLAMA[@]}"
train "$out/gpu_llama_f32.jsonl" --device cuda --batch 4 "${LLAMA[@]}"
compare train_llama_fp32_gpu_vs_cpu "$out/cpu_llama_f32.jsonl" "$out/gpu_llama_f32.jsonl" 1e-4
train "$out/cpu_llama_bf16.jsonl" --device cpu --batch 4 --mixed-precision bf16 "${LLAMA[@]}"
train "$out/gpu_llama_bf16.jsonl" --device cuda --batch 4 --mixed-precision bf16 "${LLAMA[@]}"
compare train_llama_bf16_gpu_vs_cpu "$out/cpu_llama_bf16.jsonl" "$out/gpu_llama_bf16.jsonl" 2e-2
train "$out/gpu_np2.jsonl" -np 2 --device cuda --batch 2
train "$out/gpu_np1.jsonl" --device cuda --batch 4
compare two_ranks_one_gpu_vs_one_rank "$out/gpu_np1.jsonl" "$out/gpu_np2.jsonl" 1e-5
fi  # train

# N. NCCL
if want nccl; then
    say "nccl: $(grep -h -m 1 '^ok NCCL loaded' "$out/test_cuda_nccl.log" 2>/dev/null || echo "test_cuda_nccl did not load it (see test_cuda_nccl.log)") ${FSDP_NCCL_LIBRARY:+from $FSDP_NCCL_LIBRARY}"
    np2_test test_cuda_nccl
    grep -h -E '^(ok two ranks|NCCL REFUSED)' "$out/test_cuda_nccl_np2.log" | cut -c1-240 | sed 's/^/    /' | tee -a "$summary"
    same_bits() {  # same_bits NAME A B: two --save files byte for byte
        if [ -s "$2" ] && cmp -s "$2" "$3"; then say "PASS $1: saved weights identical"; else say "FAIL $1: saved weights differ or missing"; fails=$((fails + 1)); fi
    }
    train "$out/nccl1_f32.jsonl" --device cuda --batch 4 --comm nccl --save "$out/nccl1_f32.safetensors"
    train "$out/host1_f32.jsonl" --device cuda --batch 4 --comm host --save "$out/host1_f32.safetensors"
    same_bits nccl_1rank_vs_staged_fp32 "$out/host1_f32.safetensors" "$out/nccl1_f32.safetensors"
    train "$out/nccl1_bf16.jsonl" --device cuda --batch 4 --mixed-precision bf16 --comm nccl --save "$out/nccl1_bf16.safetensors"
    train "$out/host1_bf16.jsonl" --device cuda --batch 4 --mixed-precision bf16 --comm host --save "$out/host1_bf16.safetensors"
    same_bits nccl_1rank_vs_staged_bf16 "$out/host1_bf16.safetensors" "$out/nccl1_bf16.safetensors"
    train "$out/nccl1_hsdp.jsonl" --device cuda --batch 4 --strategy hybrid_shard --comm nccl --save "$out/nccl1_hsdp.safetensors"
    train "$out/host1_hsdp.jsonl" --device cuda --batch 4 --strategy hybrid_shard --comm host --save "$out/host1_hsdp.safetensors"
    same_bits nccl_1rank_vs_staged_hybrid_shard "$out/host1_hsdp.safetensors" "$out/nccl1_hsdp.safetensors"
    # the device check: two ranks on one GPU under --comm nccl, no NCCL_HOSTID: a one-line error, non-zero
    train "$out/nccl_dup.jsonl" -np 2 --device cuda --batch 2 --comm nccl
    rc=$?
    if [ $rc -ne 0 ] && grep -q "share GPU" "$out/nccl_dup.jsonl.out"; then say "PASS two ranks on one GPU, --comm nccl: $(grep -m 1 'share GPU' "$out/nccl_dup.jsonl.out" | cut -c1-200)"; else say "FAIL two ranks on one GPU, --comm nccl: rc=$rc, no 'share GPU' line"; fails=$((fails + 1)); fi
    # several ranks on the one GPU through NCCL, a NCCL_HOSTID each (NCCL then sees separate hosts)
    [ -s "$out/gpu_np1.jsonl" ] || train "$out/gpu_np1.jsonl" --device cuda --batch 4
    hostid_train() {  # hostid_train LOG N ARGS...: fsdp-train on N ranks, rank r with NCCL_HOSTID=fsdp-rank-r
        local log=$1 n=$2; shift 2
        timeout 240 mpirun -np "$n" --bind-to none sh -c 'NCCL_HOSTID=fsdp-rank-$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
            "$bin/fsdp-train" --layers 3 --d-model 128 --heads 4 --seq 64 --steps 6 --warmup 2 --lr 1e-3 --seed 7 \
            --device cuda --comm nccl --log-jsonl "$log" "$@" >"$log.out" 2>&1
    }
    for c in "2 full_shard 2" "2 shard_grad_op 2" "2 no_shard 2" "4 hybrid_shard 1 --shard-group-size 2"; do
        set -- $c
        n=$1 strat=$2 batch=$3
        shift 3
        log="$out/nccl_np${n}_$strat.jsonl"
        hostid_train "$log" "$n" --strategy "$strat" --batch "$batch" "$@"
        if ! [ -s "$log" ] && grep -q -E "ncclCommInitRank|Duplicate GPU" "$log.out"; then
            say "SKIP nccl_${n}_ranks_one_gpu_$strat: NCCL refused $n ranks on one GPU with a NCCL_HOSTID each: $(grep -m 1 -E 'ncclCommInitRank|Duplicate' "$log.out" | cut -c1-200) (staged: step 3)"
        else
            compare "nccl_${n}_ranks_one_gpu_${strat}_vs_1_rank" "$out/gpu_np1.jsonl" "$log" 1e-5
        fi
    done
    # the machinery's overhead: GPT-2 124M bf16 on 1 rank through NCCL against the same run staged (in a
    # group of one rank staged is no collective at all: the identity on the stream)
    for m in host nccl; do
        timeout 200 "$bin/fsdp-train" --device cuda --comm $m --layers 12 --d-model 768 --heads 12 --seq 1024 --vocab 50257 \
            --batch 8 --steps 5 --warmup 1 --mixed-precision bf16 --log-jsonl "$out/gpt2_$m.jsonl" >"$out/gpt2_$m.out" 2>&1
    done
    python3 "$here/scripts/gpu_tokens_ratio.py" "$out/gpt2_host.jsonl" "$out/gpt2_nccl.jsonl" 2>&1 | tee -a "$summary"
fi  # nccl
for f in "$out"/*.jsonl.out; do grep -q -i -E "error|abort|fail" "$f" && { echo "== $f"; tail -5 "$f"; } >>"$out/errors.txt"; done

# 4. speed: GPT-2 124M shapes, bf16 (6N + 12 L T C FLOPs per token against 989 TFLOP/s dense bf16)
if want speed; then
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
fi  # speed
say "failures: $fails"
[ $fails -eq 0 ]
