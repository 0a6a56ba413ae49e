#pragma once
// What the single-process and the sharded checkpoint writers share (checkpoint.cpp).

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::nn {

// The step of a canonical checkpoint directory name ("step_00000042"), or nullopt.
std::optional<int64_t> parse_checkpoint_name(const std::string& name);

// A checkpoint's JSON file (state.json, manifest.json, a shard's or a local set's index; a
// Hugging Face folder's config.json and index),
// depth-checked before it is parsed; throws naming the file on any parse error (a number past
// a double's range included: nlohmann's out_of_range, found by fuzz/checkpoint_state).
nlohmann::json read_json_file(const std::string& path);

// <run_dir>/checkpoints/step_<step>
std::string checkpoint_path(const std::string& run_dir, int64_t step);

// JSON has no NaN or infinity (they would be written as null): throws naming `where` rather
// than lose them.
void check_finite(const nlohmann::json& j, const std::string& where);

// After step's directory is complete: points `latest` at it, drops what interrupted saves
// left, and with keep > 0 deletes all but the newest keep - 1 older checkpoints.
void publish_latest(const std::string& run_dir, int64_t step, int64_t keep);

// Tests only: TESSERA_FAULT_SAVE_PAUSE=S sleeps S seconds in the middle of every save (the
// first tensor file written, the rest not; of a sharded save, rank 0's), so that a test can make a save slower than the
// collective timeout, or kill a rank while its save is half-written.
void pause_for_fault_test();

}  // namespace tessera::nn
