// nn::ShardMap: the runs of full positions that hold a rank's local elements, against a plain
// reference that maps every local element on its own (the slice shard_of takes, element by
// element), over row and column splits, unequal segments, padding and ranges that start and end
// anywhere.

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "support/error_of.h"
#include "tessera/nn/shard_map.h"

namespace tessera::nn {
namespace {

using MapRun = std::tuple<int64_t, int64_t, int64_t>;  // (local, full, length)

std::vector<MapRun> runs_of(const ShardMap& map, int64_t begin, int64_t end) {
  std::vector<MapRun> out;
  map.for_each_run(begin, end, [&](int64_t local, int64_t full, int64_t n) {
    out.emplace_back(local, full, n);
  });
  return out;
}

// docs/parallelism.md's picture: [6, 8] split by columns over 2 ranks in segments {4, 4}.
TEST(ShardMap, TheDocumentedColumnSplit) {
  const ShardMap map(Shape{6, 8}, 1, {4, 4}, 1, 2, "w");
  EXPECT_EQ(map.local_shape(), (Shape{6, 4}));
  EXPECT_EQ(runs_of(map, 3, 9),
            (std::vector<MapRun>{{3, 7, 1}, {4, 10, 2}, {6, 14, 2}, {8, 18, 1}}));
}

// Every local element of every range lands where the element-by-element reference puts it, or
// in no run when it is padding; the runs come in local order, each element once.
TEST(ShardMap, EveryElementLandsWhereTheReferencePutsIt) {
  struct Case {
    Shape full;
    int dim;
    std::vector<int64_t> segments;  // their sum may pass full[dim]: padding
  };
  const std::vector<Case> cases = {{{12, 5}, 0, {}},
                                   {{5, 12}, 1, {}},
                                   {{24, 3}, 0, {12, 4, 8}},
                                   {{3, 24}, 1, {12, 4, 8}},
                                   {{2, 6, 3}, 1, {4, 4}},
                                   {{7, 4}, 0, {8}},
                                   {{9}, 0, {}},
                                   {{4, 3}, -1, {}}};
  for (const Case& c : cases)
    for (int size : {1, 2, 4}) {
      bool fits = c.dim < 0 || !c.segments.empty() || c.full[size_t(c.dim)] % size == 0;
      for (int64_t s : c.segments) fits = fits && s % size == 0;
      if (!fits) continue;
      for (int rank = 0; rank < size; ++rank) {
        const ShardMap map(c.full, c.dim, c.segments, rank, size, "w");
        const Shape local = map.local_shape();
        // The reference: local index i along the split dim is part k = the segment it falls in.
        std::vector<int64_t> want(size_t(local.numel()), -1);  // -1: padding
        std::vector<int64_t> segments = c.segments;
        if (c.dim >= 0 && segments.empty()) segments = {c.full[size_t(c.dim)]};
        for (int64_t e = 0; e < local.numel(); ++e) {
          std::vector<int64_t> index(local.size());
          for (int64_t rest = e, d = int64_t(local.size()) - 1; d >= 0; --d) {
            index[size_t(d)] = rest % local[int(d)];
            rest /= local[int(d)];
          }
          if (c.dim >= 0) {
            int64_t at = index[size_t(c.dim)], start = 0;
            for (int64_t s : segments) {
              if (at < s / size) {
                index[size_t(c.dim)] = start + rank * (s / size) + at;
                break;
              }
              at -= s / size;
              start += s;
            }
            if (index[size_t(c.dim)] >= c.full[size_t(c.dim)]) continue;
          }
          int64_t full = 0;
          for (size_t d = 0; d < index.size(); ++d) full = full * c.full[int(d)] + index[d];
          want[size_t(e)] = full;
        }
        for (int64_t begin = 0; begin < local.numel(); begin += 3)
          for (int64_t end : {begin + 1, begin + 5, local.numel()}) {
            if (end > local.numel()) continue;
            std::vector<int64_t> got(size_t(local.numel()), -1);
            int64_t next = begin;
            for (const auto& [l, f, n] : runs_of(map, begin, end)) {
              EXPECT_GE(l, next);  // in order, each element once
              next = l + n;
              for (int64_t i = 0; i < n; ++i) got[size_t(l + i)] = f + i;
            }
            for (int64_t e = begin; e < end; ++e)
              ASSERT_EQ(got[size_t(e)], want[size_t(e)])
                  << c.full << " dim " << c.dim << " rank " << rank << " of " << size << " element "
                  << e << " of [" << begin << ", " << end << ")";
          }
      }
    }
}

TEST(ShardMap, BadSplitsAreErrorsNamingTheTensor) {
  using tessera::testing::error_of;
  EXPECT_NE(error_of([] {
              ShardMap(Shape{5, 4}, 0, {}, 0, 2, "w");
            }).find("'w' [5, 4] dim 0 (5) does not split evenly over 2 ranks"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ShardMap(Shape{8, 4}, 0, {4, 2}, 0, 2, "w");
            }).find("'w' [8, 4] has 8 along dim 0; its segments sum to only 6"),
            std::string::npos);
  EXPECT_NE(error_of([] { ShardMap(Shape{4}, 1, {}, 0, 1, "b"); }).find("'b' [4] has no dim 1"),
            std::string::npos);
  const ShardMap map(Shape{4, 4}, 0, {}, 0, 2, "w");
  EXPECT_NE(error_of([&] {
              map.for_each_run(6, 9, [](int64_t, int64_t, int64_t) {});
            }).find("'w': elements [6, 9) are outside its 8 (local shape [2, 4])"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::nn
