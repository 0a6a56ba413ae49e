// safetensors: round trips for every dtype, and the writer's and reader's bytes checked against
// files assembled by hand here, byte by byte.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/io/safetensors_reader.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/tessera.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

using testing::error_of;
using testing::mentions;
using testing::read_bytes;
using testing::same_tensor;
using testing::TempDir;
using testing::write_bytes;

std::string u64le(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(values), s.size());
  return s;
}

// A tensor of `dtype` with distinct values, including negatives where the dtype has them.
Tensor sample(DType dtype, const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  if (is_floating(dtype)) return randn(shape, gen, dtype);
  return ops::cast(ops::mul(ops::sub(rand(shape, gen, DType::f64), 0.5), 1e6), dtype);
}

TEST(Safetensors, RoundTripsEveryDTypeBitExactly) {
  TempDir dir;
  StateDict tensors;
  uint64_t seed = 1;
  for (DType dtype : kAllDTypes) {
    const std::string name = std::string("t_") + dtype_name(dtype);
    tensors.emplace_back(name + ".matrix", sample(dtype, {3, 5}, seed++));
    tensors.emplace_back(name + ".odd", sample(dtype, {7}, seed++));  // odd byte counts
    tensors.emplace_back(name + ".scalar", sample(dtype, {}, seed++));
    tensors.emplace_back(name + ".empty", zeros({0, 4}, dtype));
  }
  // Special values survive as bits.
  tensors.emplace_back("special",
                       from_vector<float>({std::numeric_limits<float>::quiet_NaN(), -0.0f,
                                           std::numeric_limits<float>::infinity(), 1e-45f},
                                          {4}));
  const std::string path = dir.file("all.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "é ü"}});

  SafetensorsFile back = read_safetensors(path);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first) << "header order is the written order";
    EXPECT_TRUE(same_tensor(back.tensors[i].second, tensors[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(back.metadata, (SafetensorsMetadata{{"format", "pt"}, {"note", "é ü"}}));

  // Every tensor starts at a multiple of its element size, and the data region at 8.
  SafetensorsHeader header = read_safetensors_header(path);
  EXPECT_EQ(header.data_start % 8, 0u);
  for (const SafetensorsEntry& e : header.entries)
    EXPECT_EQ((header.data_start + e.begin) % dtype_size(e.dtype), 0u) << e.name;
}

TEST(Safetensors, WritesNonContiguousViewsByValue) {
  TempDir dir;
  Tensor base = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = ops::transpose(base, 0, 1);  // [[0, 3], [1, 4], [2, 5]]
  write_safetensors(dir.file("v.safetensors"), {{"t", t}});
  Tensor back = read_safetensors(dir.file("v.safetensors")).tensors.at(0).second;
  EXPECT_EQ(back.shape(), Shape({3, 2}));
  EXPECT_EQ(to_vector<float>(back), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Safetensors, WriterBytesMatchAHandBuiltFile) {
  TempDir dir;
  StateDict tensors = {{"b", from_vector<float>({1.0f, 2.0f}, {2})},
                       {"a", from_vector<BFloat16>({1.0f, -2.0f, 0.5f}, {3})},
                       {"c", from_vector<int64_t>({7}, {1})}};
  write_safetensors(dir.file("x.safetensors"), tensors, {{"format", "pt"}});

  // Header in the given order; data widest first: c (8 bytes), b (4), a (2).
  std::string json = R"({"__metadata__":{"format":"pt"},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                     R"("a":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                     R"("c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  json.append((8 - json.size() % 8) % 8, ' ');  // 8 + N is a multiple of 8
  const std::string expected = u64le(json.size()) + json + raw<int64_t>({7}) +
                               raw<float>({1.0f, 2.0f}) +
                               raw<uint16_t>({0x3f80, 0xc000, 0x3f00});  // bf16 bits
  EXPECT_EQ(read_bytes(dir.file("x.safetensors")), expected);
}

TEST(Safetensors, ReadsAHandBuiltFile) {
  TempDir dir;
  // Pretty-printed JSON with the tensors out of data order, as other writers may produce.
  const std::string json = R"({
    "scalar": {"dtype": "I32", "shape": [], "data_offsets": [8, 12]},
    "__metadata__": {"source": "hand"},
    "w": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}
  })";
  const std::string bytes = u64le(json.size()) + json +
                            raw<uint16_t>({0x3c00, 0xc000, 0x3800, 0x7c00}) +  // 1, -2, .5, inf
                            raw<int32_t>({-123456});
  write_bytes(dir.file("h.safetensors"), bytes);

  SafetensorsFile f = read_safetensors(dir.file("h.safetensors"));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "scalar");
  EXPECT_EQ(f.tensors[0].second.dim(), 0);
  EXPECT_EQ(f.tensors[0].second.item<int32_t>(), -123456);
  EXPECT_EQ(f.tensors[1].first, "w");
  EXPECT_EQ(f.tensors[1].second.dtype(), DType::f16);
  EXPECT_EQ(f.tensors[1].second.shape(), Shape({2, 2}));
  EXPECT_EQ(to_vector<float>(f.tensors[1].second),
            (std::vector<float>{1.0f, -2.0f, 0.5f, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(f.metadata, (SafetensorsMetadata{{"source", "hand"}}));
}

TEST(Safetensors, EmptyFileHasNoTensors) {
  TempDir dir;
  write_safetensors(dir.file("e.safetensors"), {});
  EXPECT_EQ(read_bytes(dir.file("e.safetensors")), u64le(8) + "{}      ");
  EXPECT_TRUE(read_safetensors(dir.file("e.safetensors")).tensors.empty());
}

TEST(Safetensors, WriterRejectsBadInputAndLeavesTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("keep.safetensors");
  write_safetensors(path, {{"x", ones({2})}});
  const std::string before = read_bytes(path);

  EXPECT_TRUE(mentions(error_of([&] {
                         write_safetensors(path, {{"x", ones({2})}, {"x", zeros({3})}});
                       }),
                       {path, "'x'", "twice"}));
  EXPECT_TRUE(mentions(error_of([&] {
                         write_safetensors(path, {{"__metadata__", ones({1})}});
                       }),
                       {"reserved"}));
  EXPECT_TRUE(mentions(error_of([&] {
                         write_safetensors(path, {{"u", Tensor()}});
                       }),
                       {"'u'", "undefined"}));
  EXPECT_TRUE(mentions(error_of([&] {
                         write_safetensors(path, {{"y", ones({1})}}, {{"k", "a"}, {"k", "b"}});
                       }),
                       {"metadata key 'k'"}));
  EXPECT_EQ(read_bytes(path), before);
  // No temporary files are left beside it.
  auto entries = std::filesystem::directory_iterator(dir.path());
  EXPECT_EQ(std::distance(begin(entries), end(entries)), 1);
}

// The range reader: any range of a tensor, in the file's dtype or cast; and a shard fill, which
// reads rank r's slice of a full tensor (shard_of's), zero past the rows the file holds when
// the model pads them. What does not fit is an error naming the file and the tensor.
TEST(SafetensorsReader, ReadsAnyRangeAndAShardOfTheFullTensor) {
  TempDir dir;
  const std::string path = dir.path() + "/m.safetensors";
  const Tensor w = sample(DType::f32, {6, 4}, 3), b = sample(DType::bf16, {5, 4}, 4);
  write_safetensors(path, {{"w", w}, {"b", b}});
  auto file = std::make_shared<const SafetensorsReader>(path);
  const SafetensorsEntry* e = file->find("w");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(file->find("nope"), nullptr);
  Tensor got = empty({7});
  file->read_elements(*e, 9, got);
  EXPECT_EQ(to_vector<float>(got), to_vector<float>(ops::narrow(ops::reshape(w, {24}), 0, 9, 7)));
  file->read_elements(*file->find("b"), 0, got);  // bf16 in the file, cast to f32
  EXPECT_EQ(to_vector<float>(got),
            to_vector<float>(ops::narrow(ops::reshape(ops::cast(b, DType::f32), {20}), 0, 0, 7)));
  EXPECT_TRUE(mentions(error_of([&] { file->read_elements(*e, 20, got); }),
                       {path, "elements [20, 27) of tensor 'w' [6, 4] are outside it"}));

  const auto source = std::make_shared<const TensorSource>(TensorSource::of_file(file));
  ParamMeta cols;
  cols.shard = ShardKind::cols;
  for (int r = 0; r < 2; ++r) {
    const Tensor slice =
        materialize({6, 2}, DType::f32, source_fill(source, "w", {6, 4}, cols, r, 2));
    EXPECT_TRUE(same_tensor(slice, shard_of(w, cols, r, 2, "w"))) << r;
  }
  // The file holds 5 of the model's 6 rows (unpadded_size): rank 1's last row is zero.
  ParamMeta rows;
  rows.shard = ShardKind::rows;
  rows.segments = {6};
  rows.unpadded_size = 5;
  const Tensor padded =
      materialize({3, 4}, DType::bf16, source_fill(source, "b", {6, 4}, rows, 1, 2));
  EXPECT_TRUE(same_tensor(padded, shard_of(b, rows, 1, 2, "b")));
  EXPECT_EQ(to_vector<float>(ops::cast(ops::select(padded, 0, 2), DType::f32)),
            std::vector<float>(4, 0.0f));

  EXPECT_TRUE(mentions(error_of([&] {
                         source_fill(source, "nope", {6, 4}, rows, 0, 2);
                       }),
                       {path, "no tensor 'nope'"}));
  EXPECT_TRUE(mentions(error_of([&] {
                         source_fill(source, "w", {8, 4}, cols, 0, 2);
                       }),
                       {path, "tensor 'w' is [6, 4]; the model's full tensor is [8, 4]"}));
}

// A stacked tensor: rows from two files and zero rows, as Hugging Face Llama's q, k and v make
// c_attn and its vocabulary is padded. Every range reads as the concatenation would hold it,
// cast to the reader's dtype; a tensor-parallel rank's fill of the stacked rows (three
// segments) is shard_of's part of the concatenation. What does not stack is refused by name.
TEST(TensorSource, AStackedTensorReadsAsItsConcatenation) {
  TempDir dir;
  const std::string one = dir.path() + "/a.safetensors", two = dir.path() + "/b.safetensors";
  const Tensor q = sample(DType::bf16, {4, 3}, 5), k = sample(DType::bf16, {2, 3}, 6);
  const Tensor v = sample(DType::bf16, {2, 3}, 7);
  write_safetensors(one, {{"q", q}, {"k", k}});
  write_safetensors(two, {{"v", v}, {"odd", sample(DType::f32, {2, 4}, 8)}});
  auto a = std::make_shared<const SafetensorsReader>(one);
  auto b = std::make_shared<const SafetensorsReader>(two);
  TensorSource source(dir.path());
  source.add("qkv", {8, 3}, {{a, a->find("q"), 4}, {a, a->find("k"), 2}, {b, b->find("v"), 2}});
  source.add("padded", {5, 3}, {{b, b->find("v"), 2}, {nullptr, nullptr, 3}});
  const Tensor qkv = ops::cat({q, k, v}, 0);
  const Tensor flat = ops::reshape(ops::cast(qkv, DType::f32), {24});
  for (int64_t first : {0, 5, 11, 12, 17})  // inside a block, across one or two boundaries
    for (int64_t n : {int64_t(1), int64_t(7), 24 - first}) {
      if (first + n > 24) continue;
      Tensor got = empty({n});
      source.read(*source.find("qkv"), first, got);
      EXPECT_EQ(to_vector<float>(got), to_vector<float>(ops::narrow(flat, 0, first, n)))
          << first << " " << n;
    }
  const StateDict all = source.read_all();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].second.dtype(), DType::bf16);
  EXPECT_TRUE(same_tensor(all[0].second, qkv));
  EXPECT_TRUE(same_tensor(all[1].second, ops::cat({v, zeros({3, 3}, DType::bf16)}, 0)));

  auto shared = std::make_shared<const TensorSource>(source);
  ParamMeta rows;
  rows.shard = ShardKind::rows;
  rows.segments = {4, 2, 2};
  for (int r = 0; r < 2; ++r) {
    const Tensor part =
        materialize({4, 3}, DType::f32, source_fill(shared, "qkv", {8, 3}, rows, r, 2));
    EXPECT_TRUE(same_tensor(part, shard_of(ops::cast(qkv, DType::f32), rows, r, 2, "qkv"))) << r;
  }

  EXPECT_TRUE(mentions(error_of([&] {
                         source.add("bad", {4, 4}, {{a, a->find("q"), 4}});
                       }),
                       {one, "tensor 'q' has shape [4, 3], expected [4, 4]"}));
  EXPECT_TRUE(mentions(error_of([&] {
                         source.add("short", {6, 3}, {{a, a->find("q"), 4}});
                       }),
                       {dir.path(), "the blocks of 'short' hold 4 rows, the tensor 6"}));
  EXPECT_TRUE(mentions(error_of([&] {
                         source.add("qkv", {4, 3}, {{a, a->find("q"), 4}});
                       }),
                       {"tensor 'qkv' is given twice"}));
  Tensor past = empty({2});
  EXPECT_TRUE(mentions(error_of([&] { source.read(*source.find("padded"), 14, past); }),
                       {"elements [14, 16) of tensor 'padded' [5, 3] are outside it"}));
}

}  // namespace
}  // namespace tessera::nn
