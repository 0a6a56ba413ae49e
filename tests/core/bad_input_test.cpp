// Bad input to the norm, embedding and cross-entropy ops: each mistake throws tessera::Error,
// and the message names the op and the offending shape, dtype, position or value.

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "tessera/tessera.h"

namespace tessera {
namespace {

// Runs fn, expects a tessera::Error, and checks its message contains every fragment.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
    return;
  }
  ADD_FAILURE() << "expected a tessera::Error";
}

Tensor ids_of(std::initializer_list<int64_t> v, const Shape& s, DType dt = DType::i64) {
  return ops::cast(from_vector<int64_t>(std::vector<int64_t>(v), s), dt);
}

TEST(BadInput, EmbeddingIdOutOfRangeNamesPositionAndValue) {
  Tensor w = zeros(Shape{10, 4});
  // Flat position 4 (row 1, column 1) holds 12, outside [0, 10).
  Tensor ids = ids_of({1, 2, 3, 4, 12, 5}, Shape{2, 3});
  expect_error([&] { ops::embedding(w, ids); },
               {"embedding", "id 12", "position 4", "[0, 10)", "i64[2, 3]"});
  expect_error(
      [&] {
        tessera::embedding(w, ids_of({0, -1}, Shape{2}, DType::i32));
      },
      {"embedding", "id -1", "position 1", "i32[2]"});
  expect_error(
      [&] {
        ops::embedding_backward(ids_of({9, 10}, Shape{2}), zeros(Shape{2, 4}), 10);
      },
      {"embedding_backward", "id 10", "position 1"});
}

TEST(BadInput, EmbeddingRejectsWrongDtypesAndShapes) {
  expect_error(
      [&] {
        ops::embedding(zeros(Shape{10, 4}), zeros(Shape{3}));
      },
      {"embedding", "ids", "i32 or i64", "f32[3]"});
  expect_error([&] { ops::embedding(zeros(Shape{10}), ids_of({1}, Shape{1})); },
               {"embedding", "2-d", "f32[10]"});
  expect_error(
      [&] {
        ops::embedding(zeros(Shape{10, 4}, DType::i64), ids_of({1}, Shape{1}));
      },
      {"embedding", "weight", "i64[10, 4]"});
  expect_error(
      [&] {
        ops::embedding_backward(ids_of({1, 2}, Shape{2}), zeros(Shape{3, 4}), 10);
      },
      {"embedding_backward", "f32[3, 4]", "i64[2]"});
}

TEST(BadInput, CrossEntropyTargetOutOfRangeNamesPositionAndValue) {
  Tensor logits = zeros(Shape{2, 3, 5});
  // Flat position 3 holds 5, outside [0, 5); -100 (ignore_index) before it is fine.
  Tensor targets = ids_of({0, -100, 4, 5, 1, 2}, Shape{2, 3}, DType::i32);
  expect_error([&] { ops::cross_entropy_forward(logits, targets); },
               {"cross_entropy", "target 5", "position 3", "[0, 5)", "ignore_index (-100)"});
  // A negative target that is not the ignore index.
  expect_error(
      [&] {
        tessera::cross_entropy(logits, ids_of({0, 1, -1, 0, 0, 0}, Shape{2, 3}));
      },
      {"cross_entropy", "target -1", "position 2"});
}

TEST(BadInput, CrossEntropyRejectsIntegerLogits) {
  expect_error(
      [&] {
        ops::cross_entropy_forward(zeros(Shape{4, 5}, DType::i32), ids_of({0, 1, 2, 3}, Shape{4}));
      },
      {"cross_entropy", "logits", "floating", "i32[4, 5]"});
}

TEST(BadInput, CrossEntropyTargetsShapeMismatch) {
  expect_error(
      [&] {
        ops::cross_entropy_forward(zeros(Shape{2, 3, 5}), ids_of({0, 1}, Shape{2}));
      },
      {"cross_entropy", "targets", "i64[2]", "[2, 3]", "f32[2, 3, 5]"});
  expect_error(
      [&] {
        ops::cross_entropy_forward(zeros(Shape{4, 5}), zeros(Shape{4}));
      },
      {"cross_entropy", "targets", "i32 or i64", "f32[4]"});
  expect_error(
      [&] {
        ops::cross_entropy_forward(zeros(Shape{4, 0}), zeros(Shape{4}, DType::i64));
      },
      {"cross_entropy", "class", "f32[4, 0]"});
}

TEST(BadInput, LayerNormWrongWeightShape) {
  Tensor x = zeros(Shape{2, 8});
  expect_error([&] { ops::layernorm_forward(x, zeros(Shape{7}), Tensor()); },
               {"layernorm", "weight", "[8]", "f32[2, 8]", "f32[7]"});
  expect_error(
      [&] {
        tessera::layernorm(x, zeros(Shape{8}), zeros(Shape{2, 8}));
      },
      {"layernorm", "bias", "[8]", "f32[2, 8]"});
  expect_error(
      [&] {
        ops::rmsnorm_forward(x, zeros(Shape{1, 8}));
      },
      {"rmsnorm", "weight", "[8]", "f32[1, 8]"});
}

TEST(BadInput, NormRejectsIntegerAndEmptyInputs) {
  expect_error(
      [&] {
        ops::layernorm_forward(zeros(Shape{2, 8}, DType::i64), zeros(Shape{8}), Tensor());
      },
      {"layernorm", "floating", "i64[2, 8]"});
  expect_error(
      [&] {
        ops::rmsnorm_forward(zeros(Shape{2, 8}), zeros(Shape{8}, DType::i32));
      },
      {"rmsnorm", "weight", "i32[8]"});
  expect_error([&] { ops::layernorm_forward(zeros(Shape{}), zeros(Shape{1}), Tensor()); },
               {"layernorm", "last dim", "f32[]"});
  expect_error(
      [&] {
        ops::layernorm_forward(zeros(Shape{2, 8}), Tensor(), Tensor());
      },
      {"layernorm", "weight", "undefined"});
}

TEST(BadInput, NormBackwardChecksSavedStatistics) {
  Tensor x = zeros(Shape{3, 4}), w = ones(Shape{4});
  ops::LayerNormOutput f = ops::layernorm_forward(x, w, Tensor());
  expect_error([&] { ops::layernorm_backward(x, w, f.mean, zeros(Shape{2}), x, true, true); },
               {"layernorm_backward", "rstd", "f32[3]", "f32[2]"});
  expect_error(
      [&] {
        ops::layernorm_backward(x, w, f.mean, f.rstd, zeros(Shape{3, 5}), true, true);
      },
      {"layernorm_backward", "gradient", "f32[3, 5]", "f32[3, 4]"});
}

TEST(BadInput, EmptyRefusesShapesWhoseStridesOrBytesOverflow) {
  // An empty tensor's strides count the zero as 1: 4 * 2^62 overflowed int64 (UBSan; a
  // safetensors header reached it, found with fuzz/safetensors).
  expect_error([] { empty({0, int64_t(1) << 62, 4}); }, {"empty", "63 bits"});
  expect_error([] { empty({int64_t(1) << 40, int64_t(1) << 40}); }, {"empty", "63 bits"});
  expect_error([] { empty({int64_t(1) << 61}, DType::f64); }, {"empty", "64 bits"});
  EXPECT_EQ(empty({0, int64_t(1) << 40}).numel(), 0);
}

}  // namespace
}  // namespace tessera
