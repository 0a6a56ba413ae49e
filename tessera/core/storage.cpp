#include "tessera/core/storage.h"

#include "tessera/core/error.h"

namespace tessera {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

std::shared_ptr<Storage> Storage::unallocated(size_t nbytes, Device device) {
  auto s = std::make_shared<Storage>(nullptr, nbytes, device, nullptr);
  s->allocator_ = &allocator_for(device);
  s->released_ = true;
  s->ever_allocated_ = false;
  return s;
}

Storage::~Storage() {
  release();
}

void* Storage::data(const char* op) const {
  TESSERA_CHECK(ever_allocated_, op, ": the tensor's storage (", nbytes_, " bytes on ", device_,
                ") has no memory yet: it is a deferred parameter, which the parallel layer ",
                "allocates and fills (nn::ModelParallel::defer_parameters)");
  TESSERA_CHECK(!released_, op, ": the tensor's storage (", nbytes_, " bytes on ", device_,
                ") has been freed; a view of released storage cannot be read or written");
  return data_;
}

void Storage::release() {
  if (released_) return;
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
  data_ = nullptr;
  released_ = true;
}

void Storage::reallocate() {
  TESSERA_CHECK(allocator_ != nullptr,
                "storage reallocate: wrapped external memory cannot be "
                "reallocated");
  if (!released_) return;
  data_ = allocator_->allocate(nbytes_);
  released_ = false;
  ever_allocated_ = true;
}

}  // namespace tessera
