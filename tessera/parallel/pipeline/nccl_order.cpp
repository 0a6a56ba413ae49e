// A rank alternates compute actions (which never wait here) and groups. Each round posts the
// next group of every rank that is between groups, then completes every posted group whose
// operations all met their peers'. Matching is by position on each channel, so an operation
// meets its peer when the peer has posted as many operations on the channel as its own index.
// A round that completes nothing while groups are posted is a deadlock. Each group is posted
// and completed once, so the check costs O(actions + groups x ranks).

#include "tessera/parallel/pipeline/detail/nccl_order.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/simulator.h"

namespace tessera::parallel {

namespace {

bool is_transfer(const Action& a) {
  return a.is_send() || a.is_recv();
}

using Channel = std::tuple<int, int, int>;  // sender, receiver, tag

}  // namespace

std::vector<TransferGroup> transfer_groups(const std::vector<Action>& list, NcclGrouping grouping) {
  std::vector<TransferGroup> groups;
  for (size_t i = 0; i < list.size();) {
    if (list[i].kind == ActionKind::all_reduce_tied) {
      groups.push_back({i, i + 1});
      ++i;
    } else if (is_transfer(list[i])) {
      size_t j = i + 1;
      if (grouping == NcclGrouping::consecutive)
        while (j < list.size() && is_transfer(list[j])) ++j;
      groups.push_back({i, j});
      i = j;
    } else {
      ++i;
    }
  }
  return groups;
}

std::vector<std::string> nccl_order_errors(const Schedule& s, NcclGrouping grouping) {
  const int p = s.stages;
  std::vector<std::vector<TransferGroup>> groups(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) groups[size_t(r)] = transfer_groups(s.ranks[size_t(r)], grouping);

  // Operations posted so far per channel end, and per rank: the next group, whether it is
  // posted, and each of its operations' index on its channel.
  std::map<Channel, int> sends_posted, recvs_posted;
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<bool> posted(static_cast<size_t>(p), false);
  std::vector<std::vector<std::pair<Channel, int>>> ops(
      static_cast<size_t>(p));  // (channel, index)
  std::vector<std::vector<bool>> op_is_send(static_cast<size_t>(p));
  std::vector<int> tied_posted(static_cast<size_t>(p), 0);  // all-reduce groups posted per rank

  auto done = [&](int r) { return next[size_t(r)] >= groups[size_t(r)].size(); };
  for (bool progress = true; progress;) {
    progress = false;
    // Post the next group of every rank that has none in flight.
    for (int r = 0; r < p; ++r) {
      if (posted[size_t(r)] || done(r)) continue;
      const TransferGroup& g = groups[size_t(r)][next[size_t(r)]];
      ops[size_t(r)].clear();
      op_is_send[size_t(r)].clear();
      for (size_t i = g.begin; i < g.end; ++i) {
        const Action& a = s.ranks[size_t(r)][i];
        if (a.kind == ActionKind::all_reduce_tied) {
          ++tied_posted[size_t(r)];
          continue;
        }
        const int tag = message_tag(s, r, a);
        const Channel c = a.is_send() ? Channel{r, a.peer, tag} : Channel{a.peer, r, tag};
        int& count = a.is_send() ? sends_posted[c] : recvs_posted[c];
        ops[size_t(r)].push_back({c, count++});
        op_is_send[size_t(r)].push_back(a.is_send());
      }
      posted[size_t(r)] = true;
      progress = true;
    }
    // Complete every posted group whose operations all met their peers'.
    std::vector<int> completing;
    for (int r = 0; r < p; ++r) {
      if (!posted[size_t(r)]) continue;
      bool met = true;
      for (size_t k = 0; k < ops[size_t(r)].size() && met; ++k) {
        const auto& [c, index] = ops[size_t(r)][k];
        const auto& other = op_is_send[size_t(r)][k] ? recvs_posted : sends_posted;
        auto it = other.find(c);
        met = it != other.end() && it->second > index;
      }
      const TransferGroup& g = groups[size_t(r)][next[size_t(r)]];
      if (met && s.ranks[size_t(r)][g.begin].kind == ActionKind::all_reduce_tied) {
        const int partner = r == 0 ? p - 1 : 0;
        met = tied_posted[size_t(partner)] >= tied_posted[size_t(r)];
      }
      if (met) completing.push_back(r);
    }
    for (int r : completing) {
      posted[size_t(r)] = false;
      ++next[size_t(r)];
      progress = true;
    }
  }

  std::vector<std::string> errors;
  for (int r = 0; r < p; ++r) {
    if (done(r)) continue;
    const TransferGroup& g = groups[size_t(r)][next[size_t(r)]];
    std::string waits;
    for (size_t i = g.begin; i < g.end; ++i) {
      const Action& a = s.ranks[size_t(r)][i];
      waits += str_cat(waits.empty() ? "" : ", ", a.to_string());
    }
    errors.push_back(str_cat("rank ", r, " stuck in its group of actions ", g.begin, "..",
                             g.end - 1, " (", waits, "): no peer posts the matching operations"));
  }
  return errors;
}

Schedule nccl_issue_order(const Schedule& s) {
  if (s.in_nccl_issue_order) return s;
  const int p = s.stages;
  // When every action completes with asynchronous sends (the dry run with its default costs,
  // every compute taking time); the key (time, transfer after compute, rank, index) orders all
  // actions of all ranks, each rank's list in its own order, and a transfer that completes when
  // a compute ends after it.
  const SimulationResult run = check_schedule(s);
  using Key = std::tuple<double, int, int, size_t>;
  std::vector<std::vector<Key>> key(static_cast<size_t>(p));
  std::map<Channel, std::vector<std::pair<int, size_t>>> senders;  // channel -> (rank, index)
  for (int r = 0; r < p; ++r) {
    const std::vector<Action>& list = s.ranks[size_t(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      key[size_t(r)].push_back({run.end_times[size_t(r)][i], list[i].is_compute() ? 0 : 1, r, i});
      if (list[i].is_send())
        senders[Channel{r, list[i].peer, message_tag(s, r, list[i])}].push_back({r, i});
    }
  }
  // Each send takes its receive's key: the k-th receive on a channel meets the k-th send.
  std::map<Channel, int> matched;
  std::vector<std::vector<Key>> moved = key;
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < s.ranks[size_t(r)].size(); ++i) {
      const Action& a = s.ranks[size_t(r)][i];
      if (!a.is_recv()) continue;
      const Channel c{a.peer, r, message_tag(s, r, a)};
      const auto& [sender, index] = senders[c][size_t(matched[c]++)];
      moved[size_t(sender)][index] = key[size_t(r)][i];
    }
  Schedule out = s;
  for (int r = 0; r < p; ++r) {
    std::vector<size_t> order(s.ranks[size_t(r)].size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return moved[size_t(r)][x] < moved[size_t(r)][y]; });
    for (size_t i = 0; i < order.size(); ++i)
      out.ranks[size_t(r)][i] = s.ranks[size_t(r)][order[i]];
  }
  out.in_nccl_issue_order = true;
  return out;
}

}  // namespace tessera::parallel
