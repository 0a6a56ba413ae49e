#pragma once
// Storage: one device buffer shared by a tensor and all its views.
//
// release() frees the memory while views still point at it (ZeRO-3 frees gathered parameters
// after use this way); any later access through a view throws instead of reading freed memory.
// unallocated() makes a storage that has a size and a device but no memory until reallocate():
// a model built with deferred parameters holds only these until the parallel layer fills them.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tessera/core/allocator.h"
#include "tessera/core/device.h"

namespace tessera {

class Storage {
 public:
  // Allocates nbytes on `device` from its allocator.
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere (a memory-mapped file, a host program's buffer); `deleter`
  // runs when the storage is released or destroyed. It may be empty.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  // A storage of nbytes on `device` that holds no memory yet (released(), never allocated):
  // reallocate() gives it memory.
  static std::shared_ptr<Storage> unallocated(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The buffer; throws naming `op` if the storage has been released.
  void* data(const char* op = "tensor access") const;
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool released() const { return released_; }
  // An unallocated() storage that has not yet had memory.
  bool never_allocated() const { return !ever_allocated_; }

  // Frees the memory now. Views stay valid handles but throw on access.
  void release();
  // Gives a released storage fresh memory of the same size (contents undefined).
  void reallocate();

  // Bumped by every in-place write, so autograd can tell that a tensor it saved for backward
  // was overwritten afterwards.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for wrapped memory
  std::function<void(void*)> deleter_;
  bool released_ = false;
  bool ever_allocated_ = true;  // false until an unallocated() storage first gets memory
  uint64_t version_ = 0;
};

}  // namespace tessera
