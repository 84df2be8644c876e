#include <cstdio>
#include <vector>

#include <fp4moe/device.hpp>
#include <fp4moe/format.hpp>
#include <fp4moe/reference.hpp>

int main() {
  std::vector<float> x(16 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 13) - 6.f;
  const fp4moe::Fp4Matrix m = fp4moe::quantize_nvfp4(x.data(), 16, 32);
  const std::vector<float> back = fp4moe::dequantize(m);
  std::printf("consumer: quantized %lld x %lld, first value %.3f, %zu devices\n", (long long)m.rows, (long long)m.cols,
              back[1], fp4moe::list_devices().size());
  return back.size() == x.size() ? 0 : 1;
}
