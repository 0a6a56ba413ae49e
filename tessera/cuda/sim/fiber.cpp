// Fiber stacks and context switching (see fiber.h). The x86-64 switch saves the callee-saved
// registers of the System V ABI (rbp, rbx, r12-r15) plus MXCSR and the x87 control word on the
// suspended stack, stores the stack pointer in the Fiber, loads the other fiber's and pops the
// same frame. A new stack is laid out as if it had been suspended by that code, with the
// trampoline as return address: the first switch "returns" into it and it calls entry(arg).

#include "tessera/cuda/sim/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tessera/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_SIM_ASAN 1
#endif
#endif

#if defined(TESSERA_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(TESSERA_SIM_UCONTEXT)
extern "C" void tessera_sim_switch_context(void** save_sp, void* new_sp);
extern "C" void tessera_sim_fiber_trampoline();

asm(R"(
  .pushsection .text
  .globl tessera_sim_switch_context
  .hidden tessera_sim_switch_context
  .type tessera_sim_switch_context, @function
  .p2align 4
tessera_sim_switch_context:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tessera_sim_switch_context, .-tessera_sim_switch_context

  .globl tessera_sim_fiber_trampoline
  .hidden tessera_sim_fiber_trampoline
  .type tessera_sim_fiber_trampoline, @function
  .p2align 4
tessera_sim_fiber_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r13, %rdi
  callq *%r12
  ud2
  .cfi_endproc
  .size tessera_sim_fiber_trampoline, .-tessera_sim_fiber_trampoline
  .popsection
)");
#endif

namespace tessera::cuda::sim::detail {
namespace {

size_t page_size() {
  static const size_t bytes = size_t(sysconf(_SC_PAGESIZE));
  return bytes;
}

// The fiber that switched to the running one; after a switch it learns its own stack bounds
// from AddressSanitizer (needed for the host thread's context, whose stack we never allocated).
thread_local Fiber* t_switched_from = nullptr;

}  // namespace

FiberStack::FiberStack(size_t bytes) {
  const size_t page = page_size();
  size_ = (bytes + page - 1) / page * page;
  mapping_bytes_ = size_ + page;
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                  -1, 0);
  TESSERA_CHECK(mapping_ != MAP_FAILED, "kernel simulator: cannot map a ", size_,
                "-byte fiber stack: ", std::strerror(errno));
  if (mprotect(mapping_, page, PROT_NONE) != 0) {
    const int err = errno;
    munmap(mapping_, mapping_bytes_);
    ::tessera::detail::throw_error("kernel simulator: cannot protect a fiber stack guard page: ",
                        std::strerror(err));
  }
  base_ = static_cast<char*>(mapping_) + page;
}

FiberStack::~FiberStack() { munmap(mapping_, mapping_bytes_); }

void Fiber::entry_point(void* self) {
  auto* fiber = static_cast<Fiber*>(self);
#if defined(TESSERA_SIM_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &t_switched_from->stack_bottom_,
                                  &t_switched_from->stack_size_);
#endif
  fiber->entry_(fiber->arg_);
  std::abort();  // entry functions end with exit_to(); returning here is a simulator bug
}

#if defined(TESSERA_SIM_UCONTEXT)
// makecontext passes int arguments only: the Fiber pointer travels in two halves.
void Fiber::ucontext_entry(unsigned hi, unsigned lo) {
  entry_point(reinterpret_cast<void*>(uintptr_t((uint64_t(hi) << 32) | uint64_t(lo))));
}
#endif

void Fiber::start(FiberStack& stack, Entry entry, void* arg) {
  entry_ = entry;
  arg_ = arg;
  stack_bottom_ = stack.base();
  stack_size_ = stack.size();
#if defined(TESSERA_SIM_ASAN)
  // Frames abandoned by an aborted block leave their redzones poisoned.
  ASAN_UNPOISON_MEMORY_REGION(stack.base(), stack.size());
#endif
#if defined(TESSERA_SIM_UCONTEXT)
  TESSERA_CHECK(getcontext(&context_) == 0, "kernel simulator: getcontext failed");
  context_.uc_stack.ss_sp = stack.base();
  context_.uc_stack.ss_size = stack.size();
  context_.uc_link = nullptr;
  const auto bits = uint64_t(reinterpret_cast<uintptr_t>(this));
  makecontext(&context_, reinterpret_cast<void (*)()>(&Fiber::ucontext_entry), 2, unsigned(bits >> 32),
              unsigned(bits & 0xffffffffu));
#else
  uint32_t mxcsr = 0;
  uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  // The frame tessera_sim_switch_context pops, top of stack 16-byte aligned so the trampoline's
  // call sees the ABI's alignment.
  auto top = (reinterpret_cast<uintptr_t>(stack.base()) + stack.size()) & ~uintptr_t(15);
  auto* slot = reinterpret_cast<uintptr_t*>(top);
  slot[-1] = reinterpret_cast<uintptr_t>(&tessera_sim_fiber_trampoline);  // return address
  slot[-2] = 0;                                                           // rbp
  slot[-3] = 0;                                                           // rbx
  slot[-4] = reinterpret_cast<uintptr_t>(&Fiber::entry_point);            // r12: function
  slot[-5] = reinterpret_cast<uintptr_t>(this);                           // r13: argument
  slot[-6] = 0;                                                           // r14
  slot[-7] = 0;                                                           // r15
  slot[-8] = uintptr_t(mxcsr) | (uintptr_t(fpu_control) << 32);
  sp_ = &slot[-8];
#endif
}

void Fiber::switch_to(Fiber& from, Fiber& to) {
  t_switched_from = &from;
#if defined(TESSERA_SIM_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, to.stack_bottom_, to.stack_size_);
#endif
#if defined(TESSERA_SIM_UCONTEXT)
  swapcontext(&from.context_, &to.context_);
#else
  tessera_sim_switch_context(&from.sp_, to.sp_);
#endif
#if defined(TESSERA_SIM_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, &t_switched_from->stack_bottom_,
                                  &t_switched_from->stack_size_);
#endif
}

void Fiber::exit_to(Fiber& from, Fiber& to) {
  t_switched_from = &from;
#if defined(TESSERA_SIM_ASAN)
  __sanitizer_start_switch_fiber(nullptr, to.stack_bottom_, to.stack_size_);
#endif
#if defined(TESSERA_SIM_UCONTEXT)
  setcontext(&to.context_);
#else
  tessera_sim_switch_context(&from.sp_, to.sp_);
#endif
  std::abort();  // nothing resumes an exited fiber
}

}  // namespace tessera::cuda::sim::detail
