#!/usr/bin/env bash
# Prepares the folder of carried dependencies for bench/gpu_check.sh. The GPU machine has nvcc,
# CMake, ninja, Python with PyTorch and pip's NCCL, and no network: it lacks Eigen, GoogleTest,
# Google Benchmark, CLI11, nlohmann-json and MPI. This downloads their Debian 12 packages (no
# install) into one git-ignored folder that travels with the checkout; gpu_check.sh unpacks
# them there with `dpkg -x` into a private prefix and points CMake at it.
#
# Usage: bench/gpu_prepare.sh [DIR]     (default: .gpu_deps in the repository root)
# Idempotent: a folder whose manifest lists exactly these packages is left as it is. Fails when
# the checkout plus the folder would exceed 64 MiB (what one call to a GPU machine carries).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/.gpu_deps}"
LIMIT_MIB=64

# What the GPU build links or includes, and the runtime libraries MPICH needs that a bare
# machine may lack. MPICH's mpiexec (hydra) is for the multi-GPU stage; one rank runs as an
# MPI singleton without it.
packages=(
  libeigen3-dev                            # CPU GEMM, vectorised math (headers)
  libgtest-dev libgmock-dev                # tests (static libraries)
  libbenchmark-dev libbenchmark1debian     # bench_gpu, bench_train_step
  libcli11-dev nlohmann-json3-dev          # the tessera command line, configs (headers)
  libmpich-dev libmpich12 mpich            # the MPI communicator and the NCCL unique id
  libhwloc15 libucx0 libnuma1 libudev1 libslurm38  # libmpich's and hydra's own libraries
)

mkdir -p "$DIR"
manifest="$DIR/manifest.txt"
want="${packages[*]}"
if [ -f "$manifest" ] && [ "$(sed -n 's/^packages: //p' "$manifest")" = "$want" ] \
  && ls "$DIR"/*.deb > /dev/null 2>&1; then
  echo "gpu_prepare: $DIR is up to date ($(du -sh "$DIR" | cut -f1))"
else
  rm -f "$DIR"/*.deb "$manifest"
  echo "gpu_prepare: downloading ${#packages[@]} packages into $DIR"
  download() {
    (cd "$DIR" && apt-get download -q "$@" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    missing=()
    for p in "${packages[@]}"; do
      ls "$DIR/${p}_"*.deb > /dev/null 2>&1 || missing+=("$p")
    done
  }
  download "${packages[@]}"
  # Package lists that were never fetched (a machine whose packages came preinstalled): fetch
  # them once and retry, where this user may.
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && command -v sudo > /dev/null && SUDO="sudo"
    if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
      $SUDO apt-get update -qq && download "${missing[@]}"
    fi
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu_prepare: not downloaded: ${missing[*]} (run 'apt-get update' first?)" >&2
    exit 1
  fi
  {
    echo "packages: $want"
    echo "prepared: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
    (cd "$DIR" && sha256sum ./*.deb)
  } > "$manifest.tmp"
  sync "$manifest.tmp" 2> /dev/null || true
  mv -f "$manifest.tmp" "$manifest"
fi

# What one call to the GPU machine carries: tracked files, untracked files git does not ignore,
# and this folder.
deps_bytes=$(du -sb "$DIR" | cut -f1)
tree_bytes=0
if git -C "$ROOT" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  tree_bytes=$(git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
    | (cd "$ROOT" && xargs -0 stat -c %s 2> /dev/null || true) | awk '{ s += $1 } END { print s + 0 }')
fi
total_mib=$(( (deps_bytes + tree_bytes) / 1048576 ))
echo "gpu_prepare: packages $((deps_bytes / 1048576)) MiB + checkout $((tree_bytes / 1048576)) MiB" \
     "= $total_mib MiB (limit $LIMIT_MIB MiB)"
if [ "$total_mib" -ge "$LIMIT_MIB" ]; then
  echo "gpu_prepare: over the $LIMIT_MIB MiB a call carries" >&2
  exit 1
fi
