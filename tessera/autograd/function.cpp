#include "tessera/autograd/function.h"

#include "tessera/autograd/grad_mode.h"

namespace tessera::autograd {

std::vector<Tensor> apply_function(const std::shared_ptr<Function>& fn,
                                   const std::vector<Tensor>& inputs) {
  TESSERA_CHECK(fn != nullptr, "apply_function: null function");
  TESSERA_CHECK(fn->next_edges().empty() && fn->output_meta().empty(),
                "apply_function: ", fn->name(),
                " was already applied; create a new Function object per call");
  bool record =
      any_requires_grad(inputs) || (is_grad_enabled() && fn->records_without_grad_inputs());
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn->forward(inputs);
  }
  if (record) {
    std::vector<Tensor*> out_ptrs;
    for (Tensor& t : outputs) {
      TESSERA_CHECK(t.defined(), "apply_function: ", fn->name(), " returned an undefined output");
      out_ptrs.push_back(&t);
    }
    fn->connect(inputs, out_ptrs);
  } else {
    fn->release_saved();
  }
  return outputs;
}

}  // namespace tessera::autograd
