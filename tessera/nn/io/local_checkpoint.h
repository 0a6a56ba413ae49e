#pragma once
// Node-local checkpoints: the fast tier. Each rank writes, into a folder on its own node,
// exactly what it needs to restore itself (its own tensors, not a share of the single-process
// state), so a restart on the same hosts and layout resumes without reading the durable tier:
//
//   <local_dir>/rank_00003/step_00000042/
//       state.safetensors   this rank's tensors (StepEngine::local_state())
//       meta.json           step, the fingerprint, the caller's state, the file's checksum;
//                           written last, so its presence makes the set complete
//
// The newest two sets of a rank are kept. A set is usable only by the rank, layout and host
// that wrote it: the fingerprint (the caller's JSON: ranks, rank, host, layout, tensor list)
// must equal the reader's. The ranks then agree by a collective on the newest step that every
// one of them holds (train::Trainer); with none newer than the durable tier, every rank falls
// back to it.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

struct LocalCheckpoint {
  int64_t step = 0;
  StateDict tensors;
  nlohmann::json state;  // the caller's (as CheckpointData::state)
  std::string dir;       // the step's directory
};

// <local_dir>/rank_<rank, 5 digits>
std::string local_rank_dir(const std::string& local_dir, int rank);

// Writes step's set into rank_dir (atomically: the tensors, fsynced, then meta.json), then
// deletes the rank's sets other than this one and the newest older one: two are kept, so that
// after a kill that cut one rank's newest write short the ranks still share a step.
// on_data_written and chunked as write_safetensors's. `state` is a JSON object (null is
// written as {}); anything else is refused before a byte is written. Returns the directory.
std::string save_local_checkpoint(const std::string& rank_dir, int64_t step,
                                  const StateDict& tensors, const nlohmann::json& fingerprint,
                                  const nlohmann::json& state,
                                  const std::function<void()>& on_data_written = nullptr,
                                  const ChunkedReads* chunked = nullptr);

// The steps of the sets in rank_dir that validate (meta.json parses, its fingerprint equals
// this one, the tensor file's size and checksum match), newest first; *why gets one line on
// what was refused, or that there is none.
std::vector<int64_t> usable_local_checkpoints(const std::string& rank_dir,
                                              const nlohmann::json& fingerprint, std::string* why);

// Reads and validates one of them.
LocalCheckpoint load_local_checkpoint(const std::string& rank_dir, int64_t step,
                                      const nlohmann::json& fingerprint);

}  // namespace tessera::nn
