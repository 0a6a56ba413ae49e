// Fuzzes the llm.c model reader (nn/io/llmc.h): the 256-int header, its sizes against the
// file, and the weights that follow.

#include "fuzz/fuzz_input.h"
#include "tessera/nn/io/llmc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tessera::fuzz::write_input("model.bin", data, size);
  return tessera::fuzz::expect_value_or_error([&] {
    tessera::nn::GPTConfig config;
    tessera::nn::import_llmc_gpt2(path, &config);
  });
}
