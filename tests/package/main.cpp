// A research codebase embedding Tessera: build a tiny graph, backpropagate, check the gradient.

#include <tessera/tessera.h>

#include <cmath>
#include <cstdio>

int main() {
  using namespace tessera;
  Tensor x = from_vector<float>({1.0f, 2.0f, 3.0f}, {3});
  x.set_requires_grad(true);
  Tensor y = sum(mul(x, x));  // dy/dx = 2x
  y.backward();
  std::vector<float> g = to_vector<float>(x.grad());
  bool ok = std::abs(y.item<float>() - 14.0f) < 1e-6f && g == std::vector<float>{2, 4, 6};
  std::printf("consumer: y=%g grad=[%g, %g, %g] %s\n", y.item<float>(), g[0], g[1], g[2],
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
