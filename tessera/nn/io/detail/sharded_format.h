#pragma once
// The sharded checkpoint's file format as its writer (sharded_checkpoint.cpp) and its reader
// (sharded_reader.cpp) share it: names, versions, and the checked accessors every untrusted
// field of a manifest or a shard index goes through.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/dtype.h"
#include "tessera/core/shape.h"
#include "tessera/nn/io/sharded_checkpoint.h"

namespace tessera::nn::sharded_format {

constexpr const char* kManifestFormat = "tessera-sharded-checkpoint";
constexpr const char* kShardFormat = "tessera-shard";
constexpr int64_t kShardedVersion = 1;

// "shard_00003": a rank's file stem.
std::string shard_stem(int rank);

nlohmann::json dims_json(std::span<const int64_t> dims);

// A field of an untrusted object, with its expected type checked; throws naming `where`.
const nlohmann::json& field(const nlohmann::json& obj, const char* key,
                            bool (nlohmann::json::*is)() const, const char* type,
                            const std::string& where);
int64_t int_field(const nlohmann::json& obj, const char* key, const std::string& where);
// At most 8 integers in [0, 2^40].
std::vector<int64_t> dims_field(const nlohmann::json& obj, const char* key,
                                const std::string& where);
// A shape whose element count fits 2^40, so no product of its dims overflows.
Shape to_shape(const std::vector<int64_t>& dims, const std::string& where);

// One piece record of a shard index (no data): its dtype, safetensors key and length apart.
ShardPiece parse_piece(const nlohmann::json& j, const std::string& where, DType* dtype,
                       std::string* key, int64_t* length);

}  // namespace tessera::nn::sharded_format
