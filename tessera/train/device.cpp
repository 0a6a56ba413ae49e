#include "tessera/train/detail/device.h"

#include "tessera/core/backend.h"
#if defined(TESSERA_HAS_CUDA)
#include "tessera/cuda/cuda.h"
#endif

namespace tessera::train {

namespace {

[[noreturn]] void unavailable(const std::string& command, const char* why) {
  throw DeviceUnavailable(
      str_cat("tessera ", command, ": --device cuda: no CUDA device (", why, ")"));
}

}  // namespace

Device open_train_device(const std::string& name, int local_rank, const std::string& command) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda-sim") {
    // The program registers the simulated backend (tessera::cuda::use_simulated_device(), in
    // tessera::cuda_simulated): this layer only checks that it did.
    bool simulated = false;
    try {
      simulated = backend_for(Device::cuda(0)).device().is_cuda();
#if defined(TESSERA_HAS_CUDA)
      simulated = simulated && cuda::device_is_simulated();
#endif
    } catch (const Error&) {
    }
    if (!simulated)
      throw DeviceUnavailable(
          str_cat("tessera ", command,
                  ": --device cuda-sim: the simulated CUDA device is not registered in "
                  "this program (the tessera command registers it; a program of your own calls "
                  "tessera::cuda::use_simulated_device() from tessera::cuda_simulated first)"));
    return Device::cuda(0);
  }
  TESSERA_CHECK(name == "cuda", command, ": --device must be cpu, cuda or cuda-sim, got '", name,
                "'");
#if defined(TESSERA_HAS_CUDA)
  // A program (a test) that registered the simulator over the GPU backend trains on it.
  if (cuda::device_is_simulated()) return Device::cuda(0);
  const int count = cuda::device_count();
  if (count == 0) unavailable(command, "no GPU found");
  const int index = local_rank % count;
  cuda::init_device(index);
  return Device::cuda(index);
#else
  // backend_for() is the registry's only query; it throws when nothing serves the type.
  try {
    backend_for(Device::cuda(0));
  } catch (const Error&) {
    unavailable(command, "this build has no CUDA backend");
  }
#endif
  return Device::cuda(0);
}

}  // namespace tessera::train
