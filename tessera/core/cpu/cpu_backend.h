#pragma once
// The CPU backend: Eigen for GEMM and vectorised math, OpenMP for threads. Each op family's
// methods live in their own cpu_<family>.cpp.

#include "tessera/core/backend.h"

namespace tessera {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  Allocator& allocator() override { return allocator_; }

  // Every op of the table; each family's methods are in cpu/cpu_<family>.cpp.
#define TESSERA_BACKEND_OP(name, params, args, front_ops) void name params override;
#include "tessera/core/op_table.def"

 private:
  CpuAllocator allocator_;
};

CpuBackend& cpu_backend();

}  // namespace tessera
