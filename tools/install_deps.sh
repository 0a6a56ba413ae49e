#!/usr/bin/env bash
# Installs Tessera's build and test dependencies from Debian packages (Debian 12 / bookworm).
# Safe to run repeatedly; uses sudo when not root. The CUDA toolkit (nvcc, cuBLAS, NCCL) is not
# installed here: where it exists the CUDA backend is built, and everything else works without it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  ccache                 # tools/run_tests.sh: build-minimal/ reuses build/'s compiles
  libeigen3-dev          # CPU GEMM and vectorised math
  libgtest-dev libgmock-dev  # tests
  libbenchmark-dev       # bench/
  nlohmann-json3-dev     # configs, manifests, metrics, tokenizer files
  libcli11-dev           # the tessera command line
  libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev  # tessera serve's HTTP server
  mpich libmpich-dev     # the parallel layer's MPI communicator; mpiexec runs the distributed tests
  python3                # tools/ scripts
  clang libclang-rt-14-dev libomp-dev  # tools/run_fuzzers.sh: libFuzzer, ASan, UBSan, OpenMP
  llvm-14                # llvm-symbolizer: file:line in the fuzzers' sanitizer reports
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
