#include "tessera/parallel/comm/flight_diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/core/version.h"
#include "tessera/parallel/comm/flight_recorder.h"
#include "tessera/parallel/comm/rank_files.h"

namespace tessera::parallel {

namespace {

bool is_transfer(const std::string& op) { return op == "send" || op == "recv"; }

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  TESSERA_CHECK(j.is_object() && j.contains(key), where, ": missing '", key, "'");
  const nlohmann::json& v = j.at(key);
  if constexpr (std::is_same_v<T, std::string>) {
    TESSERA_CHECK(v.is_string(), where, ": '", key, "' must be a string, got ", v.dump());
  } else {
    TESSERA_CHECK(v.is_number_integer(), where, ": '", key, "' must be an integer, got ",
                  v.dump());
  }
  return v.get<T>();
}

// The same collective on every member: what must agree.
std::tuple<std::string, std::string, std::string, int64_t> signature(const FlightCall& c) {
  return {c.op, c.reduce, c.dtype, c.bytes};
}

std::string op_text(const FlightCall& c) { return c.reduce.empty() ? c.op : c.op + " " + c.reduce; }
std::string size_text(const FlightCall& c) { return byte_text(c.bytes) + " " + c.dtype; }

// A merged group: every member's calls by sequence number.
struct GroupView {
  std::string name, key, label;  // label: "dp[1,3]" (world ranks; "?" where no dump says)
  std::vector<int> ranks;        // world rank per group rank (-1: unknown)
  // Per member (group order): its dump (null: none) and its collectives by sequence number.
  std::vector<const FlightDump*> dumps;
  std::vector<std::map<int64_t, const FlightCall*>> collectives;
};

class Merge {
 public:
  Merge(const std::vector<FlightDump>& dumps, int world_size) : world_size_(world_size) {
    for (const FlightDump& d : dumps) by_rank_[d.rank] = &d;
    for (const FlightDump& d : dumps) {
      for (size_t g = 0; g < d.groups.size(); ++g) {
        const FlightDumpGroup& dg = d.groups[g];
        GroupView& v = view_of(dg);
        TESSERA_CHECK(int(v.ranks.size()) == dg.size, d.source, ": group ", dg.key, " has ",
                      dg.size, " ranks here and ", v.ranks.size(), " in another dump");
        TESSERA_CHECK(v.dumps[size_t(dg.rank)] == nullptr, d.source, ": rank ", dg.rank,
                      " of group ", dg.key, " is also rank ", dg.rank, " in another dump");
        v.ranks[size_t(dg.rank)] = d.rank;
        v.dumps[size_t(dg.rank)] = &d;
        for (const FlightCall& c : d.calls)
          if (c.group == int(g) && !is_transfer(c.op)) v.collectives[size_t(dg.rank)][c.seq] = &c;
      }
    }
    // One rank without a dump (the common case: it died) fills the one unknown place of each
    // group; with more, the places stay unknown ("?").
    std::vector<int> undumped;
    for (int r = 0; r < world_size_; ++r)
      if (!by_rank_.count(r)) undumped.push_back(r);
    for (GroupView& v : views_)
      if (undumped.size() == 1 && std::count(v.ranks.begin(), v.ranks.end(), -1) == 1)
        *std::find(v.ranks.begin(), v.ranks.end(), -1) = undumped[0];
    for (GroupView& v : views_) {
      v.label = v.name + "[";
      for (size_t i = 0; i < v.ranks.size(); ++i) {
        if (i) v.label += ",";
        v.label += v.ranks[i] >= 0 ? std::to_string(v.ranks[i]) : std::string("?");
      }
      v.label += "]";
    }
  }

  FlightDiagnosis run() {
    FlightDiagnosis out;
    for (int r = 0; r < world_size_; ++r)
      if (!dump_of(r))
        findings_.push_back({0, 0, str_cat("rank ", r, " left no dump (it died, or did not dump "
                                        "within the dump window)")});
    for (const GroupView& v : views_) collective_findings(v);
    transfer_findings();
    // Causes before effects: missing dumps, then calls the ranks disagree on, then ranks that
    // never joined, then calls everyone joined; within a kind, the call that began first.
    std::stable_sort(findings_.begin(), findings_.end(), [](const Finding& a, const Finding& b) {
      return std::tie(a.kind, a.began_us) < std::tie(b.kind, b.began_us);
    });
    for (const Finding& f : findings_) out.verdicts.push_back(f.text);
    out.hang_found = !findings_.empty();
    if (findings_.empty())
      out.verdicts.push_back(
          "no hang in communication: every call of every group completed on every rank (a job "
          "that is stuck is stuck outside the collectives: compute, data loading or I/O)");
    out.slowest = slowest();
    return out;
  }

 private:
  const FlightDump* dump_of(int rank) const {
    auto it = by_rank_.find(rank);
    return it == by_rank_.end() ? nullptr : it->second;
  }
  GroupView& view_of(const FlightDumpGroup& g) {
    auto it = index_.find(g.key);
    if (it != index_.end()) return views_[it->second];
    index_[g.key] = views_.size();
    views_.push_back(GroupView{g.name, g.key, "", std::vector<int>(size_t(g.size), -1),
                               std::vector<const FlightDump*>(size_t(g.size), nullptr),
                               std::vector<std::map<int64_t, const FlightCall*>>(size_t(g.size))});
    return views_.back();
  }
  const GroupView& view_of(const FlightDump& d, int group) const {
    return views_[index_.at(d.groups.at(size_t(group)).key)];
  }

  // "dp[0,1] all_reduce #56 (step 12)", "pp[0,1] recv #31 from rank 0 (step 12)".
  std::string describe(const FlightDump& d, const FlightCall& c) const {
    const GroupView& v = view_of(d, c.group);
    std::string s = v.label + " " + c.op + " #" + std::to_string(c.seq);
    if (is_transfer(c.op) && c.peer >= 0 && c.peer < int(v.ranks.size()))
      s += (c.op == "send" ? " to rank " : " from rank ") + peer_text(v, c.peer);
    return s + " (step " + std::to_string(c.step) + ")";
  }
  static std::string peer_text(const GroupView& v, int group_rank) {
    const int r = v.ranks[size_t(group_rank)];
    return r >= 0 ? std::to_string(r) : str_cat("? (rank ", group_rank, " of ", v.name, ")");
  }

  // Where rank r went instead: its newest completed call, and the call it waits in.
  std::string whereabouts(int r) const {
    const FlightDump* d = dump_of(r);
    if (!d) return str_cat("rank ", r, " left no dump");
    const FlightCall* done = nullptr;
    const FlightCall* waiting = nullptr;
    for (const FlightCall& c : d->calls) {
      if (c.state == "completed" && (!done || c.completed_us > done->completed_us)) done = &c;
      if (c.state != "completed" && (!waiting || c.queued_us < waiting->queued_us)) waiting = &c;
    }
    std::string s = done ? str_cat("rank ", r, "'s last completed op is ", describe(*d, *done))
                         : str_cat("rank ", r, " completed no op the ring still holds");
    if (waiting) return s + str_cat("; it is blocked in ", describe(*d, *waiting));
    const int64_t last = d->calls.empty() ? 0 : d->calls.back().queued_us;
    char idle[64];
    std::snprintf(idle, sizeof idle, "%.1f", double(d->dumped_us - last) / 1e6);
    return s + str_cat("; it made no call since (", idle, " s before its dump)");
  }

  // The calls a member makes per step in this group: the distance between the first call of
  // `seq`'s step and the first of the step before (0 when the ring does not hold both).
  static int64_t calls_per_step(const std::map<int64_t, const FlightCall*>& calls, int64_t seq) {
    auto at = calls.find(seq);
    if (at == calls.end()) return 0;
    std::optional<int64_t> first_now, first_before;
    for (const auto& [s, c] : calls) {
      if (c->step == at->second->step && !first_now) first_now = s;
      if (c->step == at->second->step - 1 && !first_before) first_before = s;
    }
    return first_now && first_before ? *first_now - *first_before : 0;
  }
  // The call at the same place one step earlier: what a training loop repeats.
  static const FlightCall* one_step_before(const std::map<int64_t, const FlightCall*>& calls,
                                           int64_t seq) {
    const int64_t k = calls_per_step(calls, seq);
    if (k <= 0) return nullptr;
    auto it = calls.find(seq - k);
    return it == calls.end() ? nullptr : it->second;
  }

  void collective_findings(const GroupView& v) {
    const size_t n = v.ranks.size();
    // The first call that some member has not completed, or whose members' records disagree
    // (a transport may complete mismatched calls, with wrong data, instead of hanging).
    int64_t at = INT64_MAX, last_max = 0, last_min = INT64_MAX;
    for (size_t m = 0; m < n; ++m) {
      if (!v.dumps[m]) continue;
      const auto& calls = v.collectives[m];
      int64_t open = calls.empty() ? 1 : calls.rbegin()->first + 1;
      for (const auto& [seq, c] : calls)
        if (c->state != "completed") {
          open = seq;
          break;
        }
      at = std::min(at, open);
      const int64_t last = calls.empty() ? 0 : calls.rbegin()->first;
      last_max = std::max(last_max, last);
      last_min = std::min(last_min, last);
    }
    if (at == INT64_MAX) return;  // no member dumped
    if (!v.collectives.empty())
      for (const auto& [seq, c0] : v.collectives[0]) {
        if (seq >= at) break;
        for (size_t m = 1; m < n; ++m) {
          auto it = v.collectives[m].find(seq);
          if (it != v.collectives[m].end() && signature(*it->second) != signature(*c0)) {
            at = std::min(at, seq);
            break;
          }
        }
      }
    if (at > last_max && last_min == last_max) return;  // every call completed and agreed

    std::vector<size_t> joined, absent;
    for (size_t m = 0; m < n; ++m) {
      if (!v.dumps[m]) continue;
      (v.collectives[m].count(at) ? joined : absent).push_back(m);
    }
    if (joined.empty()) return;
    auto call = [&](size_t m) { return v.collectives[m].at(at); };
    // The reference, what the members should all have called: the signature most members hold
    // among those whose call repeats theirs of a step before (a loop repeats its calls, and a
    // group of two has no majority), else among all; the lowest rank's on a tie.
    std::vector<size_t> steady;
    for (size_t m : joined)
      if (const FlightCall* before = one_step_before(v.collectives[m], at);
          before && signature(*before) == signature(*call(m)))
        steady.push_back(m);
    const std::vector<size_t>& voters = steady.empty() ? joined : steady;
    std::map<decltype(signature(FlightCall{})), int> votes;
    for (size_t m : voters) ++votes[signature(*call(m))];
    const FlightCall* ref = nullptr;
    size_t ref_member = 0;
    int best = 0;
    for (size_t m : voters)
      if (votes[signature(*call(m))] > best)
        best = votes[signature(*call(m))], ref = call(m), ref_member = m;
    const int64_t order = ref->queued_us;
    const std::string head = str_cat("group ", v.label, " ", ref->op, " #", at, " (",
                                     size_text(*ref), ", step ", ref->step, "): ");
    for (size_t m : absent)
      findings_.push_back({2, order, head + str_cat("rank ", v.ranks[m], " never joined; ",
                                                 whereabouts(v.ranks[m]))});

    std::vector<size_t> odd;
    for (size_t m : joined)
      if (signature(*call(m)) != signature(*ref)) odd.push_back(m);
    if (odd.empty()) {
      if (!absent.empty()) return;
      std::string undumped;
      for (size_t m = 0; m < n; ++m)
        if (!v.dumps[m]) undumped += str_cat(undumped.empty() ? "" : ", ", peer_text(v, int(m)));
      if (!undumped.empty()) {
        findings_.push_back({2, order, head + str_cat("every rank that dumped joined it; rank ",
                                                      undumped, " left no dump")});
        return;
      }
      // Everyone joined the same call and it did not complete: name who came last.
      size_t first = joined[0], last = joined[0];
      for (size_t m : joined) {
        if (call(m)->queued_us < call(first)->queued_us) first = m;
        if (call(m)->queued_us > call(last)->queued_us) last = m;
      }
      char late[64];
      std::snprintf(late, sizeof late, "%.3f",
                    double(call(last)->queued_us - call(first)->queued_us) / 1e6);
      findings_.push_back({3, order, head + str_cat("every rank joined and it did not complete; ",
                                                 "rank ", v.ranks[last], " joined last, ", late,
                                                 " s after rank ", v.ranks[first])});
      return;
    }
    // The group's next call: a member's #at+1, or the reference member's one step before.
    const FlightCall* next = nullptr;
    for (const auto& calls : v.collectives)
      if (auto it = calls.find(at + 1); it != calls.end() && !next) next = it->second;
    if (!next)
      if (const int64_t k = calls_per_step(v.collectives[ref_member], at); k > 0)
        if (auto it = v.collectives[ref_member].find(at + 1 - k);
            it != v.collectives[ref_member].end())
          next = it->second;
    std::vector<size_t> mismatched;
    for (size_t m : odd) {
      const FlightCall* c = call(m);
      if (c->step != ref->step) {
        findings_.push_back({1, order, head + str_cat("rank ", v.ranks[m], " skipped it; its #",
                                                   at, " is step ", c->step, "'s ",
                                                   op_text(*c), " (", size_text(*c), ")")});
      } else if (next && signature(*c) == signature(*next)) {
        findings_.push_back({1, order, head + str_cat("rank ", v.ranks[m], " skipped it; its #",
                                                   at, " is the group's next call, ",
                                                   op_text(*c), " (", size_text(*c), ")")});
      } else {
        mismatched.push_back(m);
      }
    }
    if (mismatched.empty()) return;
    bool op_differs = false;
    for (size_t m : mismatched)
      op_differs |= call(m)->op != ref->op || call(m)->reduce != ref->reduce;
    std::string line = str_cat("group ", v.label, " #", at, " (step ", ref->step, "): ",
                               op_differs ? "op mismatch: " : "size mismatch: ");
    for (size_t i = 0; i < joined.size(); ++i) {
      const FlightCall* c = call(joined[i]);
      line += str_cat(i ? ", " : "", "rank ", v.ranks[joined[i]], " ",
                      op_differs ? op_text(*c) + " of " + size_text(*c) : size_text(*c));
    }
    findings_.push_back({1, order, line});
  }

  // A send or recv a rank blocks in whose peer holds no matching call, or one of another size.
  void transfer_findings() {
    for (const auto& [rank, d] : by_rank_) {
      for (const FlightCall& c : d->calls) {
        // A transfer posted ahead (a pipeline posts its receives early) is not a hang until
        // the rank blocks on it.
        if (!is_transfer(c.op) || c.state == "completed" || c.state == "queued") continue;
        const GroupView& v = view_of(*d, c.group);
        if (c.peer < 0 || c.peer >= int(v.ranks.size())) continue;
        const FlightDump* p = v.dumps[size_t(c.peer)];
        if (!p) continue;  // named already: it left no dump
        const int me = d->groups.at(size_t(c.group)).rank;
        const std::string want = c.op == "send" ? "recv" : "send";
        const FlightCall* match = nullptr;
        for (const FlightCall& q : p->calls)
          if (p->groups.at(size_t(q.group)).key == v.key && q.op == want && q.seq == c.seq &&
              q.peer == me)
            match = &q;
        const std::string head = str_cat("group ", v.label, " ", c.op, " #", c.seq,
                                         c.op == "send" ? " to rank " : " from rank ", p->rank,
                                         " (", size_text(c), ", step ", c.step, "): ");
        if (!match) {
          findings_.push_back({2, c.queued_us, head + str_cat("rank ", p->rank,
                                                           " never posted the matching ", want,
                                                           "; ", whereabouts(p->rank))});
        } else if (match->bytes != c.bytes || match->dtype != c.dtype) {
          findings_.push_back({1, c.queued_us, head + str_cat("size mismatch: rank ", p->rank,
                                                           "'s ", want, " is ",
                                                           size_text(*match))});
        }
      }
    }
  }

  // The rank that joins completed collectives last by the widest mean margin.
  std::string slowest() const {
    std::map<int, std::pair<double, int64_t>> lateness;  // rank -> (sum of seconds, calls)
    for (const GroupView& v : views_) {
      const size_t n = v.ranks.size();
      if (n < 2 || std::find(v.dumps.begin(), v.dumps.end(), nullptr) != v.dumps.end()) continue;
      for (const auto& [seq, c0] : v.collectives[0]) {
        std::vector<const FlightCall*> calls;
        for (size_t m = 0; m < n; ++m) {
          auto it = v.collectives[m].find(seq);
          if (it == v.collectives[m].end() || it->second->state != "completed") break;
          calls.push_back(it->second);
        }
        if (calls.size() != n) continue;
        int64_t first = INT64_MAX;
        for (const FlightCall* c : calls) first = std::min(first, c->queued_us);
        for (size_t m = 0; m < n; ++m) {
          auto& [sum, count] = lateness[v.ranks[m]];
          sum += double(calls[m]->queued_us - first) / 1e6;
          ++count;
        }
      }
    }
    int worst = -1;
    double worst_mean = -1, runner_up = 0;
    int64_t worst_calls = 0;
    for (const auto& [rank, sc] : lateness) {
      const double mean = sc.first / double(sc.second);
      if (mean > worst_mean) {
        runner_up = std::max(runner_up, worst_mean);
        worst = rank;
        worst_mean = mean;
        worst_calls = sc.second;
      } else {
        runner_up = std::max(runner_up, mean);
      }
    }
    if (worst < 0) return "";
    char text[200];
    // A rank stands out when it joins later than every other by half again and by more than
    // a millisecond (the jitter of ranks that share cores); else none is named.
    if (worst_mean < 1e-3 || worst_mean < 1.5 * runner_up) {
      std::snprintf(text, sizeof text,
                    "slowest rank: none stands out (every rank joined its collectives within "
                    "%.3f s of the first on average)",
                    worst_mean);
      return text;
    }
    std::snprintf(text, sizeof text,
                  "slowest rank: rank %d joined its collectives %.3f s after the first rank on "
                  "average (%lld calls); the next slowest %.3f s",
                  worst, worst_mean, (long long)worst_calls, std::max(runner_up, 0.0));
    return text;
  }

  int world_size_;
  std::map<int, const FlightDump*> by_rank_;
  std::vector<GroupView> views_;
  std::map<std::string, size_t> index_;  // key -> views_
  struct Finding {
    int kind;          // 0 no dump, 1 disagreement, 2 never joined, 3 joined, not complete
    int64_t began_us;  // when the call began
    std::string text;
  };
  std::vector<Finding> findings_;
};

}  // namespace

std::string byte_text(int64_t bytes) {
  char buf[32];
  if (bytes < 1000) {
    std::snprintf(buf, sizeof buf, "%lld B", (long long)bytes);
  } else {
    const char* units[] = {"kB", "MB", "GB", "TB"};
    double v = double(bytes) / 1000;
    int u = 0;
    while (v >= 1000 && u < 3) v /= 1000, ++u;
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  }
  return buf;
}

FlightDump parse_flight_dump(const nlohmann::json& j, const std::string& source) {
  TESSERA_CHECK(j.is_object(), source, ": a flight dump is a JSON object");
  TESSERA_CHECK(field<std::string>(j, "format", source) == "tessera-flight", source,
                ": 'format' is not tessera-flight");
  const int64_t version = field<int64_t>(j, "version", source);
  check_format_version(source + " 'version'", "tessera-flight", version, std::to_string(version),
                       kFlightVersion);
  FlightDump d;
  d.source = source;
  d.rank = int(field<int64_t>(j, "rank", source));
  d.host = field<std::string>(j, "host", source);
  d.reason = field<std::string>(j, "reason", source);
  d.dumped_us = field<int64_t>(j, "dumped_us", source);
  d.dropped = uint64_t(field<int64_t>(j, "dropped", source));
  TESSERA_CHECK(j.at("groups").is_array() && j.contains("records") && j.at("records").is_array(),
                source, ": 'groups' and 'records' must be arrays");
  for (size_t i = 0; i < j.at("groups").size(); ++i) {
    const nlohmann::json& g = j.at("groups")[i];
    const std::string where = str_cat(source, " groups[", i, "]");
    FlightDumpGroup group{field<std::string>(g, "name", where), field<std::string>(g, "key", where),
                          int(field<int64_t>(g, "size", where)), int(field<int64_t>(g, "rank", where))};
    TESSERA_CHECK(group.size >= 1 && group.size <= (1 << 24), where, ": 'size' ", group.size,
                  " is not a group size");
    TESSERA_CHECK(group.rank >= 0 && group.rank < group.size, where, ": 'rank' ", group.rank,
                  " is outside its ", group.size, " ranks");
    d.groups.push_back(std::move(group));
  }
  for (size_t i = 0; i < j.at("records").size(); ++i) {
    const nlohmann::json& r = j.at("records")[i];
    const std::string where = str_cat(source, " records[", i, "]");
    FlightCall c;
    c.id = uint64_t(field<int64_t>(r, "id", where));
    c.group = int(field<int64_t>(r, "group", where));
    TESSERA_CHECK(c.group >= 0 && c.group < int(d.groups.size()), where, ": 'group' ", c.group,
                  " is not one of the ", d.groups.size(), " groups");
    c.seq = field<int64_t>(r, "seq", where);
    c.op = field<std::string>(r, "op", where);
    c.dtype = field<std::string>(r, "dtype", where);
    c.state = field<std::string>(r, "state", where);
    TESSERA_CHECK(c.state == "queued" || c.state == "started" || c.state == "completed" ||
                      c.state == "failed",
                  where, ": 'state' '", c.state, "' is not queued, started, completed or failed");
    c.bytes = field<int64_t>(r, "bytes", where);
    c.step = field<int64_t>(r, "step", where);
    c.queued_us = field<int64_t>(r, "queued_us", where);
    c.started_us = field<int64_t>(r, "started_us", where);
    c.completed_us = field<int64_t>(r, "completed_us", where);
    if (r.contains("reduce")) c.reduce = field<std::string>(r, "reduce", where);
    if (r.contains("peer")) c.peer = int(field<int64_t>(r, "peer", where));
    d.calls.push_back(std::move(c));
  }
  return d;
}

std::vector<FlightDump> read_flight_dumps(const std::string& dir,
                                          std::vector<std::string>* unreadable) {
  TESSERA_CHECK(std::filesystem::is_directory(dir), "diagnose: ", dir, " is not a directory");
  std::vector<FlightDump> dumps;
  for (const RankFile& f : read_rank_json_files(dir, "diagnose", unreadable)) {
    try {
      FlightDump d = parse_flight_dump(f.json, f.path);
      TESSERA_CHECK(d.rank == f.rank, f.path, ": 'rank' is ", d.rank, ", the file name says ",
                    f.rank);
      dumps.push_back(std::move(d));
    } catch (const Error& e) {
      if (unreadable == nullptr) throw;
      unreadable->push_back(e.what());
    }
  }
  TESSERA_CHECK(!dumps.empty(), "diagnose: ", dir, " holds no valid dump (",
                unreadable ? unreadable->front() : "", ")");
  return dumps;
}

FlightDiagnosis diagnose_flight(const std::vector<FlightDump>& dumps, int world_size) {
  // A dump's group holds at most 2^24 ranks (parse_flight_dump), and so does a world. Before,
  // a negative size was taken as "from the dumps", and one below a dumped rank was used as is.
  TESSERA_CHECK(world_size >= 0 && world_size <= (1 << 24), "diagnose: the world size must be ",
                "in [1, 2^24] (0: from the dumps), got ", world_size);
  for (const FlightDump& d : dumps)
    TESSERA_CHECK(world_size == 0 || d.rank < world_size, "diagnose: ", d.source, " is rank ",
                  d.rank, ", outside a world of ", world_size, " ranks");
  // Unless told: the largest group no split made (a world), or the highest rank that dumped.
  if (world_size == 0)
    for (const FlightDump& d : dumps) {
      world_size = std::max(world_size, d.rank + 1);
      for (const FlightDumpGroup& g : d.groups)
        if (g.key.find('/') == std::string::npos) world_size = std::max(world_size, g.size);
    }
  return Merge(dumps, world_size).run();
}

}  // namespace tessera::parallel
