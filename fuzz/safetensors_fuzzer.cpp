// Fuzzes the safetensors reader (nn/io/safetensors.h) with whole files: header JSON, offsets,
// dtypes, shapes, and the data region against the file's size.

#include "fuzz/fuzz_input.h"
#include "tessera/nn/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tessera::fuzz::write_input("in.safetensors", data, size);
  return tessera::fuzz::expect_value_or_error([&] { tessera::nn::read_safetensors(path); });
}
