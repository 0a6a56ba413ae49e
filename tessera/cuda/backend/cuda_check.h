#pragma once
// TESSERA_CUDA_CHECK(call): runs a CUDA runtime call and throws tessera::Error naming the call's
// text, the error's name and description, and the file and line. GPU build only.

#include <cuda_runtime.h>

#include "tessera/core/error.h"

#define TESSERA_CUDA_CHECK(call)                                                                \
  do {                                                                                          \
    const cudaError_t tessera_cuda_status = (call);                                             \
    if (tessera_cuda_status != cudaSuccess) [[unlikely]]                                        \
      ::tessera::detail::throw_error(#call, " failed: ", cudaGetErrorName(tessera_cuda_status), \
                                     " (", cudaGetErrorString(tessera_cuda_status), ") at ",    \
                                     __FILE__, ":", __LINE__);                                  \
  } while (0)
