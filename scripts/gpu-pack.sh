#!/bin/bash
# gpu-pack.sh: what a GPU machine needs to run scripts/gpu-check.sh on binaries built here, in one folder.
#   scripts/gpu-pack.sh [BUILD_DIR] [PACK_DIR]      (defaults: build-cuda, .gpu)
# PACK_DIR/bin: the CUDA tests and fsdp-train of BUILD_DIR (a -DFSDP_CUDA=ON build), stripped.
# PACK_DIR/runtime.tar.xz: the Open MPI runtime (mpirun, its plugins and help files) and the shared
# libraries the binaries load beyond glibc, libstdc++ and cudart, with paths relative to /.
# NCCL is not carried: the binaries do not link it (the cuda device loads libnccl.so.2 with dlopen at its
# first communicator), it is 210 MB (over the device tool's 64 MiB), and the GPU machines have their own
# (PyTorch's wheel nvidia-nccl-cu13, 2.28.9), which gpu-check.sh finds and names in FSDP_NCCL_LIBRARY.
# On the GPU machine, before gpu-check.sh (files that are already there are kept):
#   command -v mpirun >/dev/null || tar -xJf .gpu/runtime.tar.xz --skip-old-files -C / && ldconfig
# The folder is ignored by git (.git/info/exclude); name it in the device tool's carry list.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-cuda}
pack=${2:-$here/.gpu}
[ -x "$build/bin/test_cuda_gemm" ] || { echo "gpu-pack.sh: $build/bin has no test_cuda_gemm (build with -DFSDP_CUDA=ON)" >&2; exit 1; }
rm -rf "$pack"
mkdir -p "$pack/bin"
for f in "$build"/bin/fsdp-train "$build"/bin/test_cuda_*; do strip -o "$pack/bin/$(basename "$f")" "$f"; done

list=$(mktemp)
trap 'rm -f "$list"' EXIT
# Open MPI's own files, less headers, manuals and the interconnects a one-GPU machine does not have
dpkg -L openmpi-bin libopenmpi3 openmpi-common |
    grep -v -E '/include/|/man/|/doc/|oshmem|java|fortran|mpifh|usempi|ucx|ofi|psm|verbs|portals' |
    while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done >"$list"
ls -d /usr/bin/mpirun /usr/bin/mpiexec /etc/alternatives/mpirun /etc/alternatives/mpiexec /etc/openmpi/* >>"$list" 2>/dev/null || true
# the libraries the binaries and Open MPI's load (each soname link and the file it names)
skip='/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libgcc_s|libstdc\+\+|libcudart|libcuda)\.so'
skip_net='libfabric|libuc[mpst]|psm|infinipath|libefa|ibverbs|rdmacm|libnl-|libmunge'
for f in $(cat "$list") "$pack"/bin/*; do
    [ -f "$f" ] && file -L "$f" | grep -q ELF || continue
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'
done | sort -u | grep -v -E "$skip" | grep -v -E "$skip_net" | while read -r lib; do
    echo "/usr${lib#/usr}"                       # merged /usr: /lib/x -> /usr/lib/x
    real=$(readlink -f "$lib"); echo "/usr${real#/usr}"
done >>"$list"
sort -u "$list" | sed 's|^/||' | tar -cJf "$pack/runtime.tar.xz" -C / -T -
echo "gpu-pack.sh: $pack: $(ls "$pack/bin" | wc -l) binaries, runtime $(du -h "$pack/runtime.tar.xz" | cut -f1)"
