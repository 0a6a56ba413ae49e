// Module trees: names, state dicts, loading, modes.

#include <gtest/gtest.h>

#include "tessera/nn/module.h"
#include "tessera/tessera.h"

namespace tessera::nn {
namespace {

struct Leaf : Module {
  Tensor weight, bias;
  Leaf() {
    weight = register_parameter("weight", zeros({2, 3}));
    bias = register_parameter("bias", zeros({3}));
    register_buffer("steps", zeros({1}, DType::i64));
  }
};

struct Tree : Module {
  std::shared_ptr<Leaf> a, b;
  Tree() {
    a = register_module("a", std::make_shared<Leaf>());
    b = register_module("b", std::make_shared<Leaf>());
  }
};

TEST(Module, NamesFollowTheTree) {
  Tree t;
  std::vector<std::string> names;
  for (auto& [n, p] : t.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias"}));
  EXPECT_EQ(t.state_dict().size(), 6u);
  EXPECT_EQ(t.num_parameters(), 18);
  EXPECT_TRUE(t.a->weight.requires_grad());
}

TEST(Module, LoadStateDictCopiesIntoTheSameHandles) {
  Tree src, dst;
  ops::fill_(src.a->weight, 1.5);
  ops::fill_(src.b->bias, -2.0);
  Tensor held = dst.a->weight;
  dst.load_state_dict(src.state_dict());
  EXPECT_EQ(to_vector<float>(held), std::vector<float>(6, 1.5f));
  EXPECT_EQ(to_vector<float>(dst.b->bias), std::vector<float>(3, -2.0f));
}

TEST(Module, LoadStateDictErrorsNameTheTensor) {
  Tree t;
  StateDict d = t.state_dict();
  d[0].second = zeros({3, 3});
  try {
    t.load_state_dict(d);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.weight"), std::string::npos) << e.what();
  }
  StateDict full = t.state_dict();
  StateDict missing(full.begin() + 1, full.end());
  EXPECT_THROW(t.load_state_dict(missing), Error);
  EXPECT_NO_THROW(t.load_state_dict(missing, /*strict=*/false));
  StateDict extra = t.state_dict();
  extra.emplace_back("c.weight", zeros({1}));
  EXPECT_THROW(t.load_state_dict(extra), Error);
}

TEST(Module, TrainEvalPropagates) {
  Tree t;
  t.eval();
  EXPECT_FALSE(t.is_training());
  EXPECT_FALSE(t.b->is_training());
  t.train();
  EXPECT_TRUE(t.a->is_training());
}

}  // namespace
}  // namespace tessera::nn
