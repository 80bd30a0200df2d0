#!/usr/bin/env bash
# scripts/same-bits.sh: do two builds train to the same bits? For refactors that must not change a
# result: each case trains a few steps with build A's and build B's tools and compares the weights
# `--save` wrote, byte for byte, then prints one line per case and a total.
#
#   scripts/same-bits.sh BUILD_A BUILD_B      (e.g. /tmp/base/build build)
#
# The matrix: fsdp-train (GPT-2 blocks) and fsdp-minimal (the seed's encoder); fp32 and bf16; the five
# strategies; activation checkpointing; --deterministic; the guard device; 1 and 3 ranks; LoRA and
# --freeze. The tensors are compared (names, dtypes, shapes, bytes), not the files' metadata, which
# records every flag. Exit status 1 when any case differs or fails.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_A BUILD_B" >&2; exit 2; }
A=$1 B=$2
for b in "$A" "$B"; do
  [ -x "$b/bin/fsdp-train" ] && [ -x "$b/bin/fsdp-minimal" ] || { echo "same-bits.sh: $b/bin: tools not built" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TRAIN="--layers 2 --d-model 32 --heads 4 --seq 16 --steps 3 --threads 1 --dropout 0.1"
MINIMAL="--layers 2 --d-model 32 --heads 4 --ffn 64 --seq 8 --global-batch 6 --steps 3 --threads 1"
cases=(
  "train 1 --batch 6"
  "train 3 --batch 2"
  "train 3 --batch 2 --strategy shard_grad_op"
  "train 3 --batch 2 --strategy no_shard"
  "train 3 --batch 2 --strategy ddp"
  "train 3 --batch 2 --strategy hybrid_shard --shard-group-size 3"
  "train 3 --batch 2 --mixed-precision bf16"
  "train 3 --batch 2 --mixed-precision bf16 --activation-checkpointing"
  "train 3 --batch 2 --activation-checkpointing"
  "train 3 --global-batch 6 --deterministic"
  "train 3 --batch 2 --device guard"
  "train 3 --batch 2 --device guard --mixed-precision bf16"
  "train 3 --batch 2 --lora-rank 4"
  "train 3 --batch 2 --freeze h.0.*"
  "minimal 1"
  "minimal 3"
  "minimal 3 --strategy no_shard --mixed-precision bf16"
  "minimal 3 --activation-checkpointing --norm-first"
  "minimal 3 --deterministic"
  "minimal 3 --device guard"
)
# the tensors of two safetensors files, names, dtypes, shapes and bytes, equal? (their __metadata__ may
# differ: it records every flag's value, and a build may add a flag)
same_tensors() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return header, raw[8 + n:]
sys.exit(0 if tensors(sys.argv[1]) == tensors(sys.argv[2]) else 1)
PY
}
fail=0 n=0
for c in "${cases[@]}"; do
  read -r tool ranks extra <<<"$c"
  n=$((n + 1))
  base=$TRAIN
  [ "$tool" = minimal ] && base=$MINIMAL
  for side in A B; do
    dir=$A
    [ $side = B ] && dir=$B
    # shellcheck disable=SC2086
    # (the same --save path for both: the file records every flag's value)
    if ! mpirun -np "$ranks" "$dir/bin/fsdp-$tool" $base $extra --save "$tmp/out.safetensors" >"$tmp/$side.log" 2>&1; then
      echo "FAIL  $c: build $side's run failed:"; tail -3 "$tmp/$side.log"; fail=1; continue 2
    fi
    mv "$tmp/out.safetensors" "$tmp/$side.safetensors"
  done
  if same_tensors "$tmp/A.safetensors" "$tmp/B.safetensors"; then
    echo "same  fsdp-$tool -np $ranks $extra"
  else
    echo "DIFF  fsdp-$tool -np $ranks $extra"; fail=1
  fi
done
echo "same-bits.sh: $n cases, $([ $fail = 0 ] && echo "all byte-identical" || echo "SOME DIFFER OR FAILED")"
exit $fail
