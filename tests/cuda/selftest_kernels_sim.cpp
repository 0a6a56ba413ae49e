// The self-test kernels compiled by the host compiler: the simulator's build of the same source
// that the nvcc check target compiles for the GPU.
#include "tessera/cuda/kernels/sim_selftest_kernels.cu"  // NOLINT(bugprone-suspicious-include)
