#include "tessera/serve/iteration_plan.h"

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"

namespace tessera::serve {

std::vector<int32_t> encode_plan(const IterationPlan& plan) {
  std::vector<int32_t> w = {plan.stop ? 1 : 0, int32_t(plan.tokens.size()),
                            int32_t(plan.segments.size()), int32_t(plan.tables.size())};
  w.insert(w.end(), plan.tokens.begin(), plan.tokens.end());
  for (const nn::PagedBatch::Segment& s : plan.segments)
    w.insert(w.end(), {int32_t(s.row), int32_t(s.start), int32_t(s.length)});
  for (const std::vector<int32_t>& row : plan.tables) {
    w.push_back(int32_t(row.size()));
    w.insert(w.end(), row.begin(), row.end());
  }
  return w;
}

IterationPlan decode_plan(std::span<const int32_t> words) {
  size_t at = 0;
  // The next n words, or an error naming where the message ends too soon.
  auto take = [&](int64_t n, const char* what) {
    TESSERA_CHECK(n >= 0 && at + size_t(n) <= words.size(), "serve: iteration plan: ", what,
                  " needs ", n, " words at offset ", at, " but the message has ", words.size());
    std::span<const int32_t> out = words.subspan(at, size_t(n));
    at += size_t(n);
    return out;
  };
  const std::span<const int32_t> head = take(4, "the header");
  TESSERA_CHECK(head[0] == 0 || head[0] == 1, "serve: iteration plan: stop flag ", head[0],
                " at offset 0 is neither 0 nor 1");
  IterationPlan plan;
  plan.stop = head[0] == 1;
  const std::span<const int32_t> tokens = take(head[1], "the tokens");
  plan.tokens.assign(tokens.begin(), tokens.end());
  const std::span<const int32_t> segments = take(int64_t(head[2]) * 3, "the segments");
  for (size_t i = 0; i < segments.size(); i += 3)
    plan.segments.push_back({segments[i], segments[i + 1], segments[i + 2]});
  for (int32_t r = 0; r < head[3]; ++r) {
    const std::span<const int32_t> length = take(1, "a block-table length");
    const std::span<const int32_t> row = take(length[0], "a block table");
    plan.tables.emplace_back(row.begin(), row.end());
  }
  TESSERA_CHECK(at == words.size(), "serve: iteration plan: ", words.size() - at,
                " words left over after offset ", at);
  return plan;
}

void BroadcastPlanChannel::send(const IterationPlan& plan) {
  const std::vector<int32_t> words = encode_plan(plan);
  broadcast_(from_vector<int64_t>({int64_t(words.size())}, Shape{1}));
  broadcast_(from_vector<int32_t>(words, Shape{int64_t(words.size())}));
}

IterationPlan BroadcastPlanChannel::receive() {
  const Tensor length = zeros(Shape{1}, DType::i64);
  broadcast_(length);
  const int64_t n = to_vector<int64_t>(length)[0];
  TESSERA_CHECK(n >= 4 && n <= (int64_t(1) << 31), "serve: the leader announced an iteration plan of ",
                n, " words");
  const Tensor words = zeros(Shape{n}, DType::i32);
  broadcast_(words);
  return decode_plan(to_vector<int32_t>(words));
}

}  // namespace tessera::serve
