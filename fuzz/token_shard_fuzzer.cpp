// Fuzzes the token shard reader (data/token_shard.h): the header against the file size, then
// every token read back through the memory map.

#include "fuzz/fuzz_input.h"
#include "tessera/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tessera::fuzz::write_input("in.bin", data, size);
  return tessera::fuzz::expect_value_or_error([&] {
    tessera::data::TokenShard shard(path);
    int64_t sum = 0;
    for (int64_t i = 0; i < shard.size(); ++i) sum += int64_t(shard.at(i));
    if (sum < 0) std::abort();  // tokens are unsigned in the file
  });
}
