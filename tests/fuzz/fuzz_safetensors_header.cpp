// libFuzzer target: the safetensors header parser on arbitrary bytes. Any
// outcome but a parsed layout or fp4moe::Error is a finding (a crash, a
// sanitizer report, or another exception escaping).
#include <cstddef>
#include <cstdint>

#include "fp4moe/error.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fp4moe::io::SafetensorsLayout layout = fp4moe::io::parse_safetensors(data, size, "fuzz input");
    // A layout that passed must describe bytes inside the input.
    for (const fp4moe::io::TensorInfo& t : layout.tensors)
      if (layout.data_start + t.end > size || t.numel() * fp4moe::io::dtype_bytes(t.dtype) != int64_t(t.bytes()))
        __builtin_trap();
  } catch (const fp4moe::Error&) {
  }
  return 0;
}
