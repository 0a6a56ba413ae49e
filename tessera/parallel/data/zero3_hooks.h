#pragma once
// Zero3Hooks: nn::UnitHooks for ZeRO-3. Each unit's parameters are all-gathered just before the
// unit runs and freed right after; the backward pass gathers them again just before the unit's
// backward and frees them once it is done.
//
//   forward:   before(unit, x): gather the unit's buckets; x passes through BeginUnit
//              after(unit, y):  free them; y passes through EndUnit
//   backward:  EndUnit's backward runs first (y's gradient is complete): gather again
//              BeginUnit's backward runs once the unit's backward reached its input: free
//
// Gathers are reference-counted per bucket, so a bucket read by two units (a tied embedding
// read by the embedding and the head) stays while either needs it. A unit whose input needs no
// gradient (the embedding reads token ids) has no BeginUnit in the graph; what its backward
// gathered is freed by finish(). Saved activations hold handles to the freed storage; the
// re-gather refills the same Storage object, so they read the right values again (the gather
// does not bump the storage version: these are the values they saved). The unit's gradients
// go through the GradReducer's hooks like every other stage's, one bucket per unit.
//
// Prefetch (on by default): every unit acquired while recording gradients is appended to this
// step's trace. The next step replays it: once the unit at position k is acquired, the buckets
// of the unit at k + 1 (the next block in forward, the previous one in backward, whatever a
// pipeline schedule interleaves) are all-gathered asynchronously, so the gather runs while
// unit k computes; unit k + 1 then waits only for what is left of it. The window is one unit
// beyond those in use. A step that departs from the trace stops prefetching until it ends and
// becomes the next trace; every rank of the dp group runs the same units in the same order, so
// they issue the same gathers in the same order. end_step() frees prefetches nobody used.
// Forward passes without gradients (evaluation) neither record nor prefetch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/model_parallel.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/data/flat_params.h"

namespace tessera::parallel {

class Zero3Hooks final : public nn::UnitHooks, public std::enable_shared_from_this<Zero3Hooks> {
 public:
  // `dp` must outlive this object.
  Zero3Hooks(const FlatLayout& layout, FlatParams& params, Communicator& dp, bool prefetch = true);

  Tensor before(const std::string& unit, const Tensor& x) override;
  Tensor after(const std::string& unit, const Tensor& x) override;

  // Frees what backward passes gathered and no BeginUnit freed. Call after each backward.
  void finish();
  // Call once per optimizer step, after the last backward and before the update: frees
  // prefetched buckets no unit acquired (their values are about to change) and makes this
  // step's trace the one the next step replays.
  void end_step();
  // Gathers every bucket (to read, load or save the full parameters) until release_all(),
  // which keeps what was written meanwhile (FlatParams::write_back) and frees them.
  void gather_all();
  void release_all();
  // After the optimizer updated the shards: gathers again every bucket held now, so views
  // of gathered parameters show the new values. Collective.
  void refresh();

  // All-gathers issued so far (one per bucket gathered), the prefetched among them, and the
  // prefetched buckets a unit then acquired.
  int64_t gathers() const { return gathers_; }
  int64_t prefetches() const { return prefetches_; }
  int64_t prefetch_hits() const { return prefetch_hits_; }

  // Used by the graph functions.
  struct Use {
    int unit = 0;
    bool held = false;  // the backward pass holds the unit's buckets
  };
  // `traced`: the acquisition belongs to a pass that records gradients (forward or backward).
  void acquire(int unit, bool traced = true);
  void release(int unit);
  void hold_for_backward(const std::shared_ptr<Use>& use);
  void end_backward(const std::shared_ptr<Use>& use);

 private:
  int unit_index(const std::string& unit, const char* hook) const;
  void acquire_buckets(const std::vector<int>& buckets);
  void release_buckets(const std::vector<int>& buckets);
  // Starts the gathers of `unit`'s buckets that no one holds or prefetched.
  void prefetch(int unit);
  // Lets MPI move the prefetches along (it progresses only inside its calls).
  void poll();

  const FlatLayout& layout_;
  FlatParams& params_;
  Communicator* dp_;
  std::vector<int> refs_;                   // per bucket
  std::vector<std::shared_ptr<Work>> inflight_;  // per bucket: a gather not yet waited for
  std::vector<char> prefetched_;  // per bucket: gathered ahead, no unit has acquired it yet
  bool prefetch_;
  std::vector<int> trace_, recording_;  // units in acquire order: last step's, this step's
  size_t position_ = 0;                 // events of this step that matched the trace
  bool on_trace_ = true;
  std::vector<std::shared_ptr<Use>> open_;  // per unit: the use before() started, until after()
  std::vector<std::shared_ptr<Use>> held_;
  bool all_held_ = false;
  int64_t gathers_ = 0, prefetches_ = 0, prefetch_hits_ = 0;
};

}  // namespace tessera::parallel
