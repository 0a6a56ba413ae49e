// The block scheduler (block_runner.h): fibers, the run queue, __syncthreads and the misuse
// reports. Cost model: a barrier costs two context switches per thread (into the scheduler and
// back), so a block of n threads crossing b barriers costs about 2*n*(b+1) switches plus the
// kernel's own work; the run queue and barrier bookkeeping are O(1) per arrival.

#include "tessera/cuda/sim/block_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::cuda::sim::detail {

bool Site::operator==(const Site& other) const {
  return line == other.line && column == other.column && std::strcmp(file, other.file) == 0;
}

std::string Site::str() const { return str_cat(file, ":", line, ":", column); }

std::string hex_mask(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}

void outside_kernel(const char* what) {
  ::tessera::detail::throw_error(what, " used outside a simulated kernel: launch the kernel with "
                            "tessera::cuda::launch");
}

BlockRunner& running(const char* what) {
  BlockRunner* runner = g_runner;
  if (runner == nullptr) outside_kernel(what);
  return *runner;
}

BlockRunner& BlockRunner::for_this_thread() {
  thread_local std::unique_ptr<BlockRunner> runner;
  if (!runner) runner = std::make_unique<BlockRunner>();
  return *runner;
}

std::string BlockRunner::thread_name(int linear) const {
  const ThreadView& v = threads_[size_t(linear)].view;
  return str_cat("(", v.thread_idx.x, ",", v.thread_idx.y, ",", v.thread_idx.z, ")");
}

std::string BlockRunner::where() const {
  return str_cat("kernel '", info_->launch->name, "' block (", block_idx_.x, ",", block_idx_.y,
                 ",", block_idx_.z, ")");
}

void BlockRunner::fail(const std::string& message) const {
  if (current_ == nullptr) throw Error(str_cat(where(), ": ", message));
  throw Error(str_cat(where(), " thread ", thread_name(current_->linear), ": ", message));
}

// "3 threads: (0,0,0)..(1,0,0), (5,0,0)": runs of consecutive ids, the first few of them.
std::string BlockRunner::thread_list(const std::vector<int>& ids) const {
  constexpr int kMaxRuns = 4;
  std::string out = str_cat(ids.size(), ids.size() == 1 ? " thread: " : " threads: ");
  int runs = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (runs == kMaxRuns) {
      out += ", ...";
      break;
    }
    if (runs > 0) out += ", ";
    out += thread_name(ids[i]);
    if (j > i) out += str_cat("..", thread_name(ids[j]));
    ++runs;
    i = j + 1;
  }
  return out;
}

std::string BlockRunner::lanes(unsigned mask) const {
  std::string out;
  for (int lane = 0; lane < int(kWarpSize); ++lane) {
    if (!(mask & (1u << lane))) continue;
    int last = lane;
    while (last + 1 < int(kWarpSize) && (mask & (1u << (last + 1)))) ++last;
    if (!out.empty()) out += ",";
    out += last > lane ? str_cat(lane, "-", last) : str_cat(lane);
    lane = last;
  }
  return out.empty() ? "none" : out;
}

void BlockRunner::prepare(const LaunchInfo& info, uint3 block_idx) {
  info_ = &info;
  block_idx_ = block_idx;
  const KernelLaunch& launch = *info.launch;
  const dim3 block = launch.block;
  num_threads_ = int(block.x * block.y * block.z);

  if (stack_bytes_ != info.options.stack_bytes) {
    stacks_.clear();
    stack_bytes_ = info.options.stack_bytes;
  }
  while (stacks_.size() < size_t(num_threads_))
    stacks_.push_back(std::make_unique<FiberStack>(stack_bytes_));
  if (threads_.size() < size_t(num_threads_)) threads_.resize(size_t(num_threads_));
  for (int i = 0; i < num_threads_; ++i) {
    SimThread& t = threads_[size_t(i)];
    const unsigned u = unsigned(i);
    t.view = ThreadView{uint3{u % block.x, (u / block.x) % block.y, u / (block.x * block.y)},
                        block_idx, block, launch.grid};
    t.linear = i;
    t.status = ThreadStatus::kReady;
    t.warp_slot = -1;
    t.fiber.start(*stacks_[size_t(i)], &BlockRunner::thread_main, &t);
  }

  const int num_warps = (num_threads_ + int(kWarpSize) - 1) / int(kWarpSize);
  warps_.assign(size_t(num_warps), WarpState{});
  for (int w = 0; w < num_warps; ++w) {
    const int lanes_here = std::min(int(kWarpSize), num_threads_ - w * int(kWarpSize));
    warps_[size_t(w)].existing = lanes_here == 32 ? 0xffffffffu : (1u << lanes_here) - 1u;
  }

  ready_.assign(size_t(num_threads_), 0);
  ready_head_ = 0;
  ready_count_ = 0;
  for (int i = 0; i < num_threads_; ++i)
    push_ready(info.options.schedule == Schedule::kForward ? i : num_threads_ - 1 - i);

  current_ = nullptr;
  error_ = nullptr;
  exited_ = 0;
  barrier_waiting_ = 0;
  barrier_true_ = 0;
  shared_.begin_block(launch.dynamic_shared_bytes, info.options.max_shared_bytes_per_block,
                      info.options.detect_races);
}

void BlockRunner::push_ready(int linear) {
  threads_[size_t(linear)].status = ThreadStatus::kReady;
  ready_[(ready_head_ + ready_count_) % ready_.size()] = linear;
  ++ready_count_;
}

void BlockRunner::run_block(const LaunchInfo& info, uint3 block_idx) {
  prepare(info, block_idx);
  struct Bind {
    explicit Bind(BlockRunner* r, SharedWindow w) {
      g_runner = r;
      g_shared_window = w;
    }
    ~Bind() {
      g_runner = nullptr;
      g_view = nullptr;
      g_shared_window = SharedWindow{};
    }
  } bind(this, shared_.window());

  while (ready_count_ > 0) {
    SimThread& t = threads_[size_t(ready_[ready_head_])];
    ready_head_ = (ready_head_ + 1) % ready_.size();
    --ready_count_;
    t.status = ThreadStatus::kRunning;
    current_ = &t;
    g_view = &t.view;
    Fiber::switch_to(scheduler_, t.fiber);
    current_ = nullptr;
    g_view = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  if (exited_ != num_threads_) diagnose_deadlock();
}

void BlockRunner::thread_main(void* arg) {
  auto* thread = static_cast<SimThread*>(arg);
  BlockRunner* runner = g_runner;
  try {
    const KernelBody& body = runner->info_->launch->body;
    body.call(body.context);
    runner->on_exit(*thread);
  } catch (...) {
    runner->error_ = std::current_exception();
  }
  thread->status = ThreadStatus::kExited;
  Fiber::exit_to(thread->fiber, runner->scheduler_);
}

// Hands control back to the scheduler until this thread is made ready again.
void BlockRunner::suspend() { Fiber::switch_to(current_->fiber, scheduler_); }

void BlockRunner::yield_thread() {
  SimThread& self = *current_;
  push_ready(self.linear);
  Fiber::switch_to(self.fiber, scheduler_);
}

void BlockRunner::on_exit(SimThread& thread) {
  thread.status = ThreadStatus::kExited;
  ++exited_;
  const int warp = thread.linear / int(kWarpSize);
  const unsigned bit = 1u << (thread.linear % int(kWarpSize));
  WarpState& w = warps_[size_t(warp)];
  w.exited |= bit;
  if (barrier_waiting_ > 0) {
    std::vector<int> waiting;
    for (int i = 0; i < num_threads_; ++i)
      if (threads_[size_t(i)].status == ThreadStatus::kBarrier) waiting.push_back(i);
    fail(str_cat("exits while ", thread_list(waiting), " wait at __syncthreads() at ",
                 barrier_site_.str(),
                 "; every thread of a block must reach every __syncthreads() (a return before "
                 "the barrier?)"));
  }
  for (const PendingWarpOp& op : w.pending) {
    if (op.in_use && (op.expected & bit))
      fail(str_cat("exits while lanes ", lanes(op.arrived), " of warp ", warp, " wait for it in ",
                   warp_op_name(op.op), " at ", op.site.str(), " (mask ", hex_mask(op.mask),
                   ")"));
  }
}

int BlockRunner::barrier(BarrierKind kind, int predicate, const Site& site) {
  SimThread& self = *current_;
  if (exited_ > 0) {
    std::vector<int> gone;
    for (int i = 0; i < num_threads_; ++i)
      if (threads_[size_t(i)].status == ThreadStatus::kExited) gone.push_back(i);
    fail(str_cat("reaches __syncthreads() at ", site.str(), " after ", thread_list(gone),
                 " exited; every thread of a block must reach every __syncthreads() (a return "
                 "before the barrier?)"));
  }
  if (barrier_waiting_ == 0) {
    barrier_site_ = site;
  } else if (!(site == barrier_site_)) {
    std::vector<int> waiting;
    for (int i = 0; i < num_threads_; ++i)
      if (threads_[size_t(i)].status == ThreadStatus::kBarrier) waiting.push_back(i);
    fail(str_cat("waits at __syncthreads() at ", site.str(), " while ", thread_list(waiting),
                 " wait at __syncthreads() at ", barrier_site_.str(),
                 "; threads of a block must meet at the same barrier (a __syncthreads() in a "
                 "divergent branch?)"));
  }
  self.status = ThreadStatus::kBarrier;
  self.wait_site = site;
  ++barrier_waiting_;
  if (predicate != 0) ++barrier_true_;
  if (barrier_waiting_ == num_threads_) {
    int result = 0;
    switch (kind) {
      case BarrierKind::kSync: break;
      case BarrierKind::kCount: result = barrier_true_; break;
      case BarrierKind::kAnd: result = barrier_true_ == num_threads_; break;
      case BarrierKind::kOr: result = barrier_true_ > 0; break;
    }
    const bool forward = info_->options.schedule == Schedule::kForward;
    for (int i = 0; i < num_threads_; ++i) {
      const int id = forward ? i : num_threads_ - 1 - i;
      threads_[size_t(id)].barrier_result = result;
      push_ready(id);
    }
    barrier_waiting_ = 0;
    barrier_true_ = 0;
    shared_.next_epoch();
  }
  suspend();
  return self.barrier_result;
}

void BlockRunner::diagnose_deadlock() const {
  std::string waits;
  std::vector<int> at_barrier;
  for (int i = 0; i < num_threads_; ++i)
    if (threads_[size_t(i)].status == ThreadStatus::kBarrier) at_barrier.push_back(i);
  if (!at_barrier.empty())
    waits += str_cat("; ", thread_list(at_barrier), " wait at __syncthreads() at ",
                     barrier_site_.str());
  for (size_t w = 0; w < warps_.size(); ++w) {
    for (const PendingWarpOp& op : warps_[w].pending) {
      if (!op.in_use) continue;
      std::vector<int> ids;
      for (int lane = 0; lane < int(kWarpSize); ++lane)
        if (op.arrived & (1u << lane)) ids.push_back(int(w) * int(kWarpSize) + lane);
      waits += str_cat("; ", thread_list(ids), " wait in ", warp_op_name(op.op), " at ",
                       op.site.str(), " for lanes ", lanes(op.expected & ~op.arrived),
                       " of warp ", w);
    }
  }
  throw Error(str_cat(where(), ": deadlock, no thread can run and ", num_threads_ - exited_,
                      " of ", num_threads_, " threads have not exited", waits));
}

unsigned BlockRunner::active_mask() const {
  const WarpState& w = warps_[size_t(current_->linear / int(kWarpSize))];
  return w.existing & ~w.exited;
}

// ---- device API entry points ------------------------------------------------------------

int barrier(BarrierKind kind, int predicate, std::source_location loc) {
  return running("__syncthreads()").barrier(kind, predicate, Site::from(loc));
}

unsigned active_mask() { return running("__activemask()").active_mask(); }

void yield_thread() {
  if (g_runner != nullptr) g_runner->yield_thread();
}

}  // namespace tessera::cuda::sim::detail
