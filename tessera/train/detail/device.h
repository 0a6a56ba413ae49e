#pragma once
// The device `tessera train --device` runs on, and moving a model there.
//
// cpu always exists. cuda means this rank's GPU of the CUDA backend (tessera/cuda/cuda.h). In a
// build with the GPU backend (TESSERA_HAS_CUDA) it is opened here, and a machine without a GPU is
// refused, unless the program registered the simulator over it (use_simulated_device(), in
// tests). In a build without it, cuda works only where the program registered a backend for
// the device type itself (tessera::cuda::use_simulated_device(), in tests); otherwise it is
// refused. No CUDA header is needed to compile the CLI either way.

#include <string>

#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/nn/module.h"

namespace tessera::train {

// The one line `tessera train` prints before exiting with status 2.
class DeviceUnavailable : public Error {
 public:
  using Error::Error;
};

// "cpu", "cuda" or "cuda-sim". cuda-sim is Device::cuda(0) served by the kernel simulator,
// which the program must have registered (tessera::cuda::use_simulated_device()). cuda opens
// GPU local_rank mod the visible GPUs (one rank per GPU on a node:
// see world.h's local_rank()) and returns it. Throws DeviceUnavailable with the message
// "tessera train: --device cuda: no CUDA device (this build has no CUDA backend)", or
// "(no GPU found)" in a GPU build on a machine without one.
// `command` names the subcommand in the messages ("train", "generate").
Device open_train_device(const std::string& name, int local_rank = 0,
                         const std::string& command = "train");

}  // namespace tessera::train
