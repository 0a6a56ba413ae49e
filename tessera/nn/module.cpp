#include "tessera/nn/module.h"

#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

Tensor find_tensor(const StateDict& dict, const std::string& name) {
  for (const auto& [n, t] : dict)
    if (n == name) return t;
  return Tensor();
}

void move_to_device(const StateDict& tensors, Device device) {
  for (const auto& [name, t] : tensors) {
    if (t.device() == device) continue;
    if (t.storage()->never_allocated()) {
      const Tensor moved = unallocated(t.shape(), t.dtype(), device);
      TensorImpl& impl = *t.shared_impl();
      impl.storage = moved.storage();
      impl.strides = moved.strides();
      impl.offset = 0;
      impl.grad.reset();
      continue;
    }
    const Tensor moved = ops::to(ops::contiguous(t), device);
    TensorImpl& impl = *t.shared_impl();
    impl.storage = moved.storage();
    impl.strides = moved.strides();
    impl.offset = moved.offset();
    impl.grad.reset();
  }
}

void Module::check_new_name(const std::string& name) const {
  TESSERA_CHECK(!name.empty() && name.find('.') == std::string::npos, "module: invalid name '",
                name, "' (names are non-empty and contain no dots)");
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  TESSERA_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "module: name '", name,
                "' is registered twice");
}

Tensor Module::register_parameter(const std::string& name, const Tensor& value) {
  return register_parameter(name, value, ParamMeta{});
}

Tensor Module::register_parameter(const std::string& name, const Tensor& value,
                                  const ParamMeta& meta, ParamFill fill) {
  check_new_name(name);
  TESSERA_CHECK(value.defined(), "register_parameter: '", name, "' is undefined");
  const bool deferred = value.storage()->never_allocated();
  TESSERA_CHECK(deferred == bool(fill), "register_parameter: '", name, "' ", value.describe(),
                deferred ? " has no memory yet and no fill to make its values"
                         : " holds its values, so it takes no fill");
  TESSERA_CHECK(
      meta.shard == ShardKind::replicated || value.dim() >= (meta.shard == ShardKind::cols ? 2 : 1),
      "register_parameter: '", name, "' ", value.describe(), " cannot be split along dim ",
      meta.shard == ShardKind::cols ? 1 : 0);
  value.set_requires_grad(true);
  params_.emplace_back(name, value);
  metas_.push_back(meta);
  fills_.push_back(std::move(fill));
  return value;
}

void Module::unregister_parameter(const std::string& name) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name) {
      params_.erase(params_.begin() + int64_t(i));
      metas_.erase(metas_.begin() + int64_t(i));
      fills_.erase(fills_.begin() + int64_t(i));
      return;
    }
  detail::throw_error("module: no parameter '", name, "' to remove");
}

Tensor Module::register_buffer(const std::string& name, const Tensor& value) {
  check_new_name(name);
  TESSERA_CHECK(value.defined(), "register_buffer: '", name, "' is undefined");
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  TESSERA_CHECK(module != nullptr, "register_module: '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool params, bool buffers, StateDict& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, buffers, out);
}

StateDict Module::named_parameters() const {
  StateDict out;
  collect("", true, false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, ParamMeta>> Module::named_parameter_meta() const {
  std::vector<std::pair<std::string, ParamMeta>> out;
  collect_meta("", out);
  return out;
}

void Module::collect_meta(const std::string& prefix,
                          std::vector<std::pair<std::string, ParamMeta>>& out) const {
  for (size_t i = 0; i < params_.size(); ++i)
    out.emplace_back(prefix + params_[i].first, metas_[i]);
  for (const auto& [n, child] : children_) child->collect_meta(prefix + n + ".", out);
}

ParamMeta Module::param_meta(const std::string& name) const {
  for (auto& [n, meta] : named_parameter_meta())
    if (n == name) return meta;
  detail::throw_error("param_meta: the model has no parameter '", name, "'");
}

StateDict Module::named_buffers() const {
  StateDict out;
  collect("", false, true, out);
  return out;
}

StateDict Module::state_dict() const {
  StateDict out;
  collect("", true, true, out);
  return out;
}

void Module::load_state_dict(const StateDict& dict, bool strict) {
  StateDict mine = state_dict();
  std::set<std::string> known;
  for (const auto& [name, target] : mine) {
    known.insert(name);
    Tensor src = find_tensor(dict, name);
    if (!src.defined()) {
      TESSERA_CHECK(!strict, "load_state_dict: missing tensor '", name, "' (", target.describe(),
                    ")");
      continue;
    }
    TESSERA_CHECK(src.shape() == target.shape(), "load_state_dict: '", name, "' has shape ",
                  src.shape(), " in the state dict but ", target.shape(), " in the model");
    if (src.is_same(target)) continue;  // read straight into the model (read_safetensors)
    NoGradGuard no_grad;
    ops::copy_(target, src);
  }
  if (strict)
    for (const auto& [name, t] : dict)
      TESSERA_CHECK(known.count(name), "load_state_dict: unexpected tensor '", name, "' (",
                    t.describe(), ") is not in the model");
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::zero_grad() {
  for (const auto& [name, t] : named_parameters()) t.set_grad(Tensor());
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

const ParamFill* Module::find_fill(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name) return &fills_[i];
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return nullptr;
  for (const auto& [n, child] : children_)
    if (name.compare(0, dot, n) == 0 && n.size() == dot)
      return child->find_fill(name.substr(dot + 1));
  return nullptr;
}

ParamFill Module::param_fill(const std::string& name) const {
  const ParamFill* fill = find_fill(name);
  TESSERA_CHECK(fill != nullptr, "param_fill: the model has no parameter '", name, "'");
  return *fill;
}

}  // namespace tessera::nn
