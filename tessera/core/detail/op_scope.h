#pragma once
// OpScope: the ops running on this thread, innermost last, for errors raised below them that
// could not otherwise say where they happened (an allocator running out of memory knows only
// the bytes it was asked for). Front-end ops that allocate open one; the autograd engine opens
// one per backward node.
//
//   Tensor matmul(const Tensor& a, const Tensor& b) {
//     const OpScope scope("matmul");
//     ...
//   }
//
// Costs two thread-local stores per op. Names must outlive the scope (string literals).

#include <string>

namespace tessera {

class OpScope {
 public:
  explicit OpScope(const char* name, const char* phase = nullptr)
      : name_(name), phase_(phase), outer_(top_) {
    top_ = this;
  }
  ~OpScope() { top_ = outer_; }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  // "matmul", "layernorm (backward) > contiguous": outermost first; "" outside every op.
  static std::string current();

 private:
  const char* name_;
  const char* phase_;
  const OpScope* outer_;
  static thread_local const OpScope* top_;
};

}  // namespace tessera
