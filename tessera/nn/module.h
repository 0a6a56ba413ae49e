#pragma once
// Module: a tree of named parameters, buffers and child modules, in registration order.
//
// Names join the path with dots ("h.0.attn.c_attn.weight"), matching the state-dict names of
// the equivalent PyTorch model where there is one. A parameter is a Tensor handle: the layer
// that registered it keeps the same handle, so load_state_dict copies values into place and
// every holder sees them.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/model_parallel.h"

namespace tessera::nn {

// An ordered list of (name, tensor); the order is the module tree's registration order.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// How to make the values of a parameter that was built without memory (a deferred parameter,
// ModelParallel::defer_parameters): writes the parameter's elements [begin, begin + n) in
// row-major order into `out`, a contiguous 1-D CPU tensor of n elements and the parameter's
// dtype. Any range, in any order, with the same result: the parallel layer fills only the
// elements a rank keeps (a ZeRO-3 shard) straight into its own buffers.
using ParamFill = std::function<void(int64_t begin, const Tensor& out)>;

// Looks a name up in a state dict; undefined Tensor if absent.
Tensor find_tensor(const StateDict& dict, const std::string& name);

// Moves every tensor of `tensors` (a module's state dict) to `device` in place: each handle
// keeps its identity, so the layers that registered it see the move; only its storage (and
// layout, made contiguous) changes. Gradients are dropped. A no-op for tensors already there.
// A deferred parameter gets an unallocated storage on `device`: nothing is copied.
void move_to_device(const StateDict& tensors, Device device);

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // All parameters of this module and its children, depth-first in registration order.
  StateDict named_parameters() const;
  std::vector<Tensor> parameters() const;
  // How each parameter is split over tensor-parallel ranks, in named_parameters() order
  // (replicated unless its layer said otherwise).
  std::vector<std::pair<std::string, ParamMeta>> named_parameter_meta() const;
  // One parameter's meta by its full name; throws naming it if there is no such parameter.
  ParamMeta param_meta(const std::string& name) const;
  // A deferred parameter's fill by its full name; empty for a parameter that holds its values.
  // Throws naming it if there is no such parameter.
  ParamFill param_fill(const std::string& name) const;
  StateDict named_buffers() const;
  // Parameters then buffers, per module, in tree order.
  StateDict state_dict() const;
  // Copies values into the registered tensors (casting dtype, moving device). With strict,
  // a missing or unexpected name is an error; a shape mismatch always is. Errors name the
  // tensor and both shapes.
  void load_state_dict(const StateDict& dict, bool strict = true);

  int64_t num_parameters() const;
  void zero_grad();
  // Training mode (dropout on) or evaluation mode, for this module and its children.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }

 protected:
  // Registers a parameter (it is marked requires_grad) and returns the same handle.
  Tensor register_parameter(const std::string& name, const Tensor& value);
  // A parameter that is a tensor-parallel shard (or a tied copy): see ParamMeta. `fill` is
  // required for a deferred value (its storage never_allocated()) and refused otherwise.
  Tensor register_parameter(const std::string& name, const Tensor& value, const ParamMeta& meta,
                            ParamFill fill = {});
  Tensor register_buffer(const std::string& name, const Tensor& value);
  // Removes a parameter of this module (a layer changing how it stores a weight); throws
  // naming it if there is none.
  void unregister_parameter(const std::string& name);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, bool params, bool buffers, StateDict& out) const;
  // The fill slot of the parameter at path `name` below this module; null if there is none.
  const ParamFill* find_fill(const std::string& name) const;
  void collect_meta(const std::string& prefix,
                    std::vector<std::pair<std::string, ParamMeta>>& out) const;

  StateDict params_;
  std::vector<ParamMeta> metas_;  // parallel to params_
  std::vector<ParamFill> fills_;  // parallel to params_; empty for a parameter with values
  StateDict buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace tessera::nn
