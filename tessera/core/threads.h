#pragma once
// The CPU backend's thread count (OpenMP and Eigen's GEMM): the public knob, here in core's
// root so that code above the backend (the trainer, a program of its own) sets it without
// reaching into core/cpu/. Results do not depend on it (cpu/parallel.h says why).

namespace tessera {

// The most threads set_num_threads takes. The largest two-socket servers have 768 hardware
// threads, and more threads than cores only take turns on them; libgomp crashed creating
// 100,000 (SIGSEGV) and failed at 32,768 on a 2-core machine with 24 GiB.
inline constexpr int kMaxThreads = 1024;

// Threads used by the CPU backend (OpenMP and Eigen's GEMM): 1 to kMaxThreads.
void set_num_threads(int n);
int num_threads();

// Sets the thread count for a scope and restores the previous one (tests, benchmarks, tools
// that compare thread counts).
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ScopedNumThreads() { set_num_threads(saved_); }
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int saved_;
};

}  // namespace tessera
