#pragma once
// The text of configs/gpus.json, compiled in by CMake (builtin_gpus.cpp.in), so `tessera plan`
// works from any directory and an installed binary carries its table.

namespace tessera::plan::detail {

const char* builtin_gpus_json();

}  // namespace tessera::plan::detail
