// safetensors reader against truncated, corrupt and hostile files: each gives a tessera::Error
// naming the file and what is wrong, never a crash, a huge allocation or a wrong tensor.

#include <gtest/gtest.h>

#include <cstring>

#include "tessera/nn/io/safetensors.h"
#include "tessera/tessera.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

using testing::error_of;
using testing::mentions;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::string u64le(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

class SafetensorsHostile : public ::testing::Test {
 protected:
  // Writes [length][json][data] and returns the reader's error.
  std::string read_error(const std::string& json, const std::string& data) {
    return read_error_raw(u64le(json.size()) + json + data);
  }
  std::string read_error_raw(const std::string& bytes) {
    write_bytes(path_, bytes);
    return error_of([&] { read_safetensors(path_); });
  }
  TempDir dir_;
  const std::string path_ = dir_.file("bad.safetensors");
};

TEST_F(SafetensorsHostile, TruncatedLengthField) {
  EXPECT_TRUE(mentions(read_error_raw(""), {path_, "0 bytes", "8-byte header length"}));
  EXPECT_TRUE(mentions(read_error_raw(std::string("\x10\x00\x00", 3)), {path_, "3 bytes"}));
}

TEST_F(SafetensorsHostile, HugeHeaderLength) {
  // 2^63: must be refused before anything is allocated.
  EXPECT_TRUE(mentions(read_error_raw(u64le(uint64_t(1) << 63) + "{}"),
                       {path_, "header length 9223372036854775808", "limit"}));
  EXPECT_TRUE(mentions(read_error_raw(u64le(1000) + "{}"),
                       {path_, "header length 1000", "past the end of the file (10 bytes)"}));
}

TEST_F(SafetensorsHostile, HeaderIsNotAJsonObject) {
  EXPECT_TRUE(mentions(read_error("", ""), {path_, "must be a JSON object"}));
  EXPECT_TRUE(mentions(read_error("[1, 2]", ""), {path_, "starting with '{'"}));
  EXPECT_TRUE(mentions(read_error(R"({"a": {"dtype": "F32", )", ""),
                       {path_, "not valid JSON", "file offset"}));
  EXPECT_TRUE(mentions(read_error("{\"a\xff\": 1}", ""), {path_, "not valid JSON"}));
  // A number past a double's range (json's out_of_range; the checkpoint fuzzer's finding).
  EXPECT_TRUE(mentions(read_error(R"({"__metadata__": 5E555})", ""),
                       {path_, "not valid JSON", "number overflow"}));
}

TEST_F(SafetensorsHostile, DuplicateNames) {
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_TRUE(mentions(read_error(R"({"w":)" + e + R"(,"w":)" + e + "}", std::string(4, '\0')),
                       {path_, "duplicate key 'w'", "two tensors with the same name"}));
  EXPECT_TRUE(
      mentions(read_error(R"({"w":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})",
                          std::string(4, '\0')),
               {path_, "duplicate key 'dtype'"}));
}

TEST_F(SafetensorsHostile, UnknownAndUnsupportedDTypes) {
  EXPECT_TRUE(mentions(
      read_error(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
      {path_, "tensor 'w'", "unknown dtype 'F33'"}));
  EXPECT_TRUE(mentions(
      read_error(R"({"m":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0')),
      {path_, "tensor 'm'", "unsupported dtype 'U8'"}));
  EXPECT_TRUE(mentions(
      read_error(R"({"m":{"dtype":7,"shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0')),
      {"tensor 'm'", "'dtype' must be a string"}));
}

TEST_F(SafetensorsHostile, LongNamesAreCutInMessages) {
  const std::string name(100000, 'n');
  const std::string msg =
      read_error(R"({")" + name + R"(":{"dtype":"X","shape":[1],"data_offsets":[0,4]}})", "");
  EXPECT_TRUE(mentions(msg, {path_, "unknown dtype 'X'", "nnn..."}));
  EXPECT_LT(msg.size(), 1000u) << "a hostile name must not flood the log";
  EXPECT_LT(read_error("{\"" + name, "").size(), 1000u);
}

TEST_F(SafetensorsHostile, BadShapes) {
  auto entry = [](const std::string& shape) {
    return R"({"w":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,4]}})";
  };
  const std::string four(4, '\0');
  EXPECT_TRUE(
      mentions(read_error(entry("[-1]"), four), {"tensor 'w'", "shape[0]", "non-negative"}));
  EXPECT_TRUE(mentions(read_error(entry("[1.5]"), four), {"tensor 'w'", "shape[0]"}));
  EXPECT_TRUE(mentions(read_error(entry("3"), four), {"tensor 'w'", "'shape' must be an array"}));
  EXPECT_TRUE(
      mentions(read_error(entry("[1,1,1,1,1,1,1,1,1]"), four), {"tensor 'w'", "9 dimensions"}));
  EXPECT_TRUE(
      mentions(read_error(entry("[4294967296, 4294967296]"), four), {"tensor 'w'", "63 bits"}));
  EXPECT_TRUE(mentions(read_error(entry("[[1]]"), four), {path_, "nests deeper"}));
}

TEST_F(SafetensorsHostile, EmptyShapeWithHugeDimensions) {
  // No elements, so no bytes, but the strides multiply the other dimensions: 4 * 2^62
  // overflowed int64 in contiguous_strides (UBSan; found with fuzz/safetensors).
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})";
  EXPECT_TRUE(
      mentions(read_error(header, ""), {path_, "tensor 'w'", "is empty", "multiply past 63 bits"}));
  // An empty tensor whose other dimensions fit still reads.
  const std::string fits = R"({"w":{"dtype":"F32","shape":[0,1024],"data_offsets":[0,0]}})";
  write_bytes(path_, u64le(fits.size()) + fits);
  EXPECT_EQ(read_safetensors(path_).tensors.at(0).second.shape(), Shape({0, 1024}));
}

TEST_F(SafetensorsHostile, ShapeAndSpanDisagree) {
  EXPECT_TRUE(mentions(read_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                                  std::string(20, '\0')),
                       {path_, "tensor 'w'", "need 24 bytes", "[0, 20] span 20"}));
}

TEST_F(SafetensorsHostile, OffsetsOutOfRange) {
  // A truncated data region: the header promises 16 bytes, the file holds 8.
  EXPECT_TRUE(mentions(read_error(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                  std::string(8, '\0')),
                       {path_, "tensor 'w'", "run past the end of the data region (8 bytes)"}));
  EXPECT_TRUE(mentions(
      read_error(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, '\0')),
      {"tensor 'w'", "end before they begin"}));
  EXPECT_TRUE(mentions(
      read_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(4, '\0')),
      {"tensor 'w'", "'data_offsets' must be [begin, end]"}));
  EXPECT_TRUE(mentions(read_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
                                  std::string(4, '\0')),
                       {"tensor 'w'", "data_offsets[0]"}));
}

TEST_F(SafetensorsHostile, OverlapsHolesAndTrailingBytes) {
  EXPECT_TRUE(mentions(read_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                  std::string(12, '\0')),
                       {path_, "'a' [0, 8)", "'b' [4, 12)", "overlap"}));
  EXPECT_TRUE(mentions(read_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                  std::string(12, '\0')),
                       {path_, "data bytes [4, 8)", "belong to no tensor"}));
  const std::string json = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_TRUE(
      mentions(read_error(json, std::string(6, '\0')),
               {path_, "2 trailing bytes", "file offset " + std::to_string(8 + json.size() + 4)}));
}

TEST_F(SafetensorsHostile, MalformedEntriesAndMetadata) {
  EXPECT_TRUE(mentions(read_error(R"({"w": 5})", ""), {"tensor 'w'", "expected an object"}));
  EXPECT_TRUE(mentions(read_error(R"({"w":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
                       {"tensor 'w'", "missing field 'data_offsets'"}));
  EXPECT_TRUE(mentions(read_error(R"({"__metadata__":{"k":3}})", ""),
                       {path_, "__metadata__ 'k' must be a string"}));
  EXPECT_TRUE(mentions(read_error(R"({"__metadata__":[]})", ""),
                       {path_, "'__metadata__' must be an object"}));
  // Nesting a real header never has is refused while parsing, not after building it.
  EXPECT_TRUE(mentions(read_error(std::string(100000, '[') + std::string(100000, ']'), ""),
                       {path_, "starting with '{'"}));
  EXPECT_TRUE(mentions(read_error("{\"w\":" + std::string(100000, '[') + "}", ""),
                       {path_, "nests deeper"}));
}

TEST_F(SafetensorsHostile, EveryTruncationIsACleanError) {
  StateDict tensors = {{"a", ones({3, 2})},
                       {"b", from_vector<int64_t>({1, 2, 3}, {3})},
                       {"c", zeros({5}, DType::bf16)}};
  write_safetensors(path_, tensors, {{"format", "pt"}});
  const std::string good = read_bytes(path_);
  for (size_t n = 0; n < good.size(); ++n) {
    std::string msg = read_error_raw(good.substr(0, n));
    EXPECT_TRUE(mentions(msg, {path_})) << "truncated to " << n << " bytes";
  }
}

TEST_F(SafetensorsHostile, CorruptHeaderBytesNeverCrash) {
  // Each header byte replaced by characters that change JSON structure or numbers: the reader
  // either still reads a consistent file or throws tessera::Error; nothing else.
  StateDict tensors = {{"a", ones({3, 2})}, {"b", from_vector<int64_t>({1, 2, 3}, {3})}};
  write_safetensors(path_, tensors);
  const std::string good = read_bytes(path_);
  const uint64_t header_end = 8 + [&] {
    uint64_t n;
    std::memcpy(&n, good.data(), 8);
    return n;
  }();
  int errors = 0;
  for (size_t i = 0; i < header_end; ++i) {
    for (char c : {'9', '0', '-', '}', '"', ',', '[', '\xff', '\0'}) {
      std::string bad = good;
      if (bad[i] == c) continue;
      bad[i] = c;
      write_bytes(path_, bad);
      try {
        SafetensorsFile f = read_safetensors(path_);
        // Accepted: then it must still describe tensors that fit the file exactly.
        uint64_t total = 0;
        for (const auto& [name, t] : f.tensors) total += t.nbytes();
        EXPECT_EQ(total, good.size() - header_end) << "byte " << i << " = " << int(c);
      } catch (const Error&) {
        ++errors;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << i << " = " << int(c) << ": " << e.what();
      }
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace tessera::nn
