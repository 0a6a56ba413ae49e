// User mistakes raise tessera::Error whose message names the op and the offending shapes,
// dtypes and devices (or the bad position or value).

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera {
namespace {

// Runs fn, which must throw tessera::Error, and checks the message contains every needle.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const InternalError& e) {
    ADD_FAILURE() << "a user mistake raised an internal error: " << e.what();
    return;
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' missing from: " << msg;
    return;
  }
  ADD_FAILURE() << "expected a tessera::Error mentioning '" << needles.front() << "'";
}

TEST(Errors, AreStdExceptions) {
  try {
    ops::add(zeros({2}), zeros({3}));
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
  }
}

TEST(Errors, MismatchedBroadcastShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4}), c = zeros({5, 1, 3}), d = zeros({2, 2});
  expect_error([&] { ops::add(a, b); }, {"add", "[2, 3]", "[4]", "cannot be broadcast"});
  expect_error([&] { tessera::mul(c, d); }, {"mul", "[5, 1, 3]", "[2, 2]"});
}

TEST(Errors, IntegerTensorToFloatingOp) {
  expect_error([] { ops::log(arange(4)); }, {"log", "floating", "i64[4]"});
  expect_error([] { tessera::exp(arange(3, DType::i32)); }, {"exp", "i32[3]"});
  expect_error([] { ops::div(arange(3), arange(3)); }, {"div", "integer division", "i64[3]"});
}

TEST(Errors, BadPermuteDims) {
  Tensor x = zeros({2, 3, 4});
  expect_error([&] { ops::permute(x, {0, 1}); }, {"permute", "2 dims given", "f32[2, 3, 4]"});
  expect_error([&] { ops::permute(x, {0, 1, 1}); }, {"permute", "repeated", "f32[2, 3, 4]"});
  expect_error([&] { ops::permute(x, {0, 1, 3}); }, {"permute", "dimension 3 is out of range"});
  expect_error([&] { tessera::transpose(x, 0, -4); }, {"transpose", "-4", "3-d"});
}

TEST(Errors, NarrowSliceAndSelectOutOfRange) {
  Tensor x = zeros({4, 5});
  expect_error([&] { ops::narrow(x, 1, 3, 4); }, {"narrow", "[3, 7)", "dimension 1", "f32[4, 5]"});
  expect_error([&] { tessera::narrow(x, 0, -1, 2); }, {"narrow", "f32[4, 5]"});
  expect_error([&] { ops::select(x, 0, 4); }, {"select", "index 4", "f32[4, 5]"});
  expect_error([&] { ops::slice(x, 1, 0, 5, 0); }, {"slice", "step", "0"});
}

TEST(Errors, ViewReshapeAndExpand) {
  Tensor x = zeros({4, 6});
  expect_error([&] { ops::view(x, {5, 5}); }, {"view", "[5, 5]", "f32[4, 6]"});
  expect_error([&] { ops::view(ops::transpose(x, 0, 1), {24}); },
               {"view", "f32[6, 4]", "without a copy", "reshape"});
  expect_error([&] { ops::reshape(x, {-1, -1}); }, {"reshape", "only one dimension may be -1"});
  expect_error([&] { ops::expand(x, {4, 7}); }, {"expand", "f32[4, 6]", "[4, 7]"});
  Tensor y = zeros({3, 5});
  expect_error([&] { ops::cat({x, y}, 0); }, {"cat", "tensor 1", "f32[3, 5]", "f32[4, 6]"});
  expect_error([&] { ops::split(x, std::vector<int64_t>{2, 3}, 1); }, {"split", "sum to 5", "6"});
}

TEST(Errors, ViewOfFreedStorage) {
  Tensor x = zeros({8});
  Tensor v = ops::narrow(x, 0, 2, 3);
  x.storage()->release();
  expect_error([&] { ops::add(v, 1.0); }, {"add", "f32[3]", "freed"});
  expect_error([&] { to_vector<float>(v); }, {"freed"});
  expect_error([&] { v.data<float>("my_kernel"); }, {"my_kernel", "freed"});
}

TEST(Errors, WrongDTypeAccess) {
  Tensor x = zeros({2}, DType::f64);
  expect_error([&] { x.data<float>("reader"); }, {"reader", "expected a f32 tensor", "f64[2]"});
  expect_error([&] { x.item<double>(); }, {"item", "one element", "f64[2]"});
}

TEST(Errors, BackwardThroughNoGrad) {
  Tensor w = ones({3});
  w.set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = tessera::sum(tessera::mul(w, 2.0));
  }
  expect_error([&] { y.backward(); }, {"backward", "f32[]", "does not require grad", "no_grad"});
  expect_error([&] { tessera::sum(w * 2.0).backward(ones({2})); }, {"backward", "[2]", "[]"});
  expect_error([&] { (w * 2.0).backward(); }, {"backward", "one-element", "f32[3]"});
}

TEST(Errors, InPlaceChangeOfSavedTensor) {
  Tensor a = ones({3}), b = ones({3});
  a.set_requires_grad(true);
  Tensor y = tessera::sum(tessera::mul(a, b));
  ops::fill_(b, 2.0);  // b was saved by mul for a's gradient
  expect_error([&] { y.backward(); }, {"mul", "modified in place"});
}

TEST(Errors, RequiresGradOnIntegers) {
  expect_error([] { arange(3).set_requires_grad(true); }, {"requires_grad", "i64[3]"});
}

}  // namespace
}  // namespace tessera
