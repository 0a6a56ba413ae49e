#pragma once
// Shared memory as a kernel sees it in the simulator. TESSERA_SHARED / TESSERA_DYNAMIC_SHARED
// (tessera/cuda/device.h) declare a SharedArray: a view of the running block's shared memory
// that every thread of the block receives for the same declaration.
//
// Indexing a SharedArray is checked: an index outside the declaration is an error naming it,
// and each element access of a scalar type (integers, floating point, bf16, f16) is reported to
// the race detector through a SharedRef proxy. Converting the array to a raw pointer (pointer
// arithmetic, reinterpret_cast to a vector type, &name[i]) gives unchecked access: what nvcc
// compiles, minus the checks.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tessera/core/half.h"

namespace tessera::cuda::sim {

// One __shared__ declaration; a static object per declaration site (and template instance).
struct SharedDecl {
  const char* name;
  size_t elem_size;
  size_t elem_align;
  size_t count;  // 0 for dynamic shared memory
  const char* file;
  int line;
};

namespace detail {

enum class SharedAccess : uint8_t { kRead, kWrite, kAtomic };

// The shared memory of the block running on this host thread.
struct SharedWindow {
  const std::byte* begin = nullptr;
  const std::byte* end = nullptr;
  bool track = false;  // race detection on
};
inline thread_local SharedWindow g_shared_window{};

inline bool in_shared(const void* p) {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= g_shared_window.begin && b < g_shared_window.end;
}

void* shared_static(const SharedDecl& decl);
void* shared_dynamic(const SharedDecl& decl, size_t* count);
void record_shared(const void* p, size_t bytes, SharedAccess access, const SharedDecl* decl,
                   int64_t index);
[[noreturn]] void shared_index_error(const SharedDecl& decl, int64_t index, size_t count);

}  // namespace detail

template <class T>
inline constexpr bool kTrackedShared =
    std::is_arithmetic_v<T> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

// One element of a SharedArray. Every operation is &&-qualified so the proxy works only as the
// temporary that name[i] returns: `auto v = name[i];` followed by a use of v does not compile
// (it would read later, not now), where `float v = name[i];` does.
template <class T>
class SharedRef {
 public:
  SharedRef(T* p, const SharedDecl* decl, int64_t index) : p_(p), decl_(decl), index_(index) {}

  operator T() && { return load(); }  // NOLINT: reads like the element it stands for
  // bf16/f16 elements convert to float in one step, as __nv_bfloat16 does under nvcc.
  operator float() &&  // NOLINT
    requires(!std::is_arithmetic_v<T>)
  {
    return float(load());
  }

  // Compound assignments take the operand by value so another element (a SharedRef) works
  // too: `s[i] += s[i + stride]`.
  T operator=(const T& v) && {
    store(v);
    return v;
  }
  T operator=(const SharedRef& other) && {
    const T v = other.load();
    store(v);
    return v;
  }
  template <class U>
  T operator+=(U v) && {
    return store(static_cast<T>(load() + std::move(v)));
  }
  template <class U>
  T operator-=(U v) && {
    return store(static_cast<T>(load() - std::move(v)));
  }
  template <class U>
  T operator*=(U v) && {
    return store(static_cast<T>(load() * std::move(v)));
  }
  template <class U>
  T operator/=(U v) && {
    return store(static_cast<T>(load() / std::move(v)));
  }
  template <class U>
  T operator|=(U v) && {
    return store(static_cast<T>(load() | std::move(v)));
  }
  template <class U>
  T operator&=(U v) && {
    return store(static_cast<T>(load() & std::move(v)));
  }
  template <class U>
  T operator^=(U v) && {
    return store(static_cast<T>(load() ^ std::move(v)));
  }
  T operator++() && { return store(static_cast<T>(load() + 1)); }
  T operator--() && { return store(static_cast<T>(load() - 1)); }
  T operator++(int) && {
    const T old = load();
    store(static_cast<T>(old + 1));
    return old;
  }
  T operator--(int) && {
    const T old = load();
    store(static_cast<T>(old - 1));
    return old;
  }
  // The raw address, for atomics and vector loads (atomics on shared memory are still seen by
  // the race detector).
  T* operator&() && { return p_; }

 private:
  T load() const {
    if (detail::g_shared_window.track)
      detail::record_shared(p_, sizeof(T), detail::SharedAccess::kRead, decl_, index_);
    return *p_;
  }
  T store(T v) const {
    if (detail::g_shared_window.track)
      detail::record_shared(p_, sizeof(T), detail::SharedAccess::kWrite, decl_, index_);
    *p_ = v;
    return v;
  }

  T* p_;
  const SharedDecl* decl_;
  int64_t index_;
};

template <class T>
class SharedArray {
 public:
  SharedArray(T* data, size_t count, const SharedDecl* decl)
      : data_(data), count_(count), decl_(decl) {}

  // Unchecked access, like the array nvcc declares.
  operator T*() const { return data_; }  // NOLINT
  T* data() const { return data_; }
  size_t size() const { return count_; }

  template <std::integral I>
  decltype(auto) operator[](I i) const {
    bool outside = uint64_t(i) >= count_;
    if constexpr (std::is_signed_v<I>) outside = outside || i < 0;
    if (outside) [[unlikely]]
      detail::shared_index_error(*decl_, int64_t(i), count_);
    if constexpr (kTrackedShared<T>) {
      return SharedRef<T>(data_ + i, decl_, int64_t(i));
    } else {
      return (data_[i]);  // T&: structs (float4, ...) are bounds-checked but not race-tracked
    }
  }

 private:
  T* data_;
  size_t count_;
  const SharedDecl* decl_;
};

template <class T>
SharedArray<T> shared_static(const SharedDecl& decl) {
  return SharedArray<T>(static_cast<T*>(detail::shared_static(decl)), decl.count, &decl);
}

template <class T>
SharedArray<T> shared_dynamic(const SharedDecl& decl) {
  size_t count = 0;
  T* data = static_cast<T*>(detail::shared_dynamic(decl, &count));
  return SharedArray<T>(data, count, &decl);
}

}  // namespace tessera::cuda::sim
