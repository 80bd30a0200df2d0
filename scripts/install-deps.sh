#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks for building and testing fsdp.c.
# As root it runs apt-get; otherwise it prints the exact line to run and fails.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libopenblas-dev libomp-dev
      python3-torch python3-numpy python3-regex gnuplot-nox clang-14 libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
line="apt-get update && apt-get install -y ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "fsdp.c: missing packages; run as root: $line" >&2
  exit 1
fi
echo "fsdp.c: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null
