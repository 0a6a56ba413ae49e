#pragma once
// Fibers: the execution contexts of simulated GPU threads. Every thread of a block gets its own
// stack and the block scheduler switches between them cooperatively on one host thread.
//
// Stacks are mmap'd with a PROT_NONE guard page below them, so a kernel that overflows its
// stack faults at a known address instead of silently corrupting its neighbour's frames.
// Switching on x86-64 is a dozen hand-written instructions (callee-saved registers, MXCSR and
// the x87 control word, then the stack pointer); no system call, unlike swapcontext, which
// saves and restores the signal mask. Other architectures fall back to ucontext. Under
// AddressSanitizer every switch is announced to it (__sanitizer_*_switch_fiber).

#include <cstddef>

#if !defined(__x86_64__) || defined(TESSERA_SIM_USE_UCONTEXT)
#define TESSERA_SIM_UCONTEXT 1
#include <ucontext.h>
#endif

namespace tessera::cuda::sim::detail {

class FiberStack {
 public:
  explicit FiberStack(size_t bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;

  char* base() const { return base_; }  // lowest usable byte, just above the guard page
  size_t size() const { return size_; }

 private:
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  char* base_ = nullptr;
  size_t size_ = 0;
};

// A suspended or running execution context. A default-constructed Fiber stands for the host
// thread's own context: switch_to() fills it in when the host thread switches away.
class Fiber {
 public:
  using Entry = void (*)(void* arg);

  // Makes the next switch into this fiber call entry(arg) on `stack`. entry must not return;
  // it ends with exit_to(). A fiber that was abandoned mid-run may be started again.
  void start(FiberStack& stack, Entry entry, void* arg);

  // Suspends `from` (the running context) and resumes `to`; returns when something switches
  // back to `from`.
  static void switch_to(Fiber& from, Fiber& to);
  // Leaves `from` for good: its stack may be reused by start().
  [[noreturn]] static void exit_to(Fiber& from, Fiber& to);

 private:
  static void entry_point(void* self);
#if defined(TESSERA_SIM_UCONTEXT)
  static void ucontext_entry(unsigned hi, unsigned lo);
#endif

#if defined(TESSERA_SIM_UCONTEXT)
  ucontext_t context_{};
#else
  void* sp_ = nullptr;  // saved stack pointer; the rest of the context is on the stack
#endif
  Entry entry_ = nullptr;
  void* arg_ = nullptr;
  const void* stack_bottom_ = nullptr;  // for AddressSanitizer
  size_t stack_size_ = 0;
};

}  // namespace tessera::cuda::sim::detail
