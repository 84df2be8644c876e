// fp4moe quantize --in DIR --out DIR: a bf16/fp32 MoE checkpoint to ModelOpt NVFP4.
#include <fmt/core.h>
#include <fmt/format.h>

#include "commands.hpp"
#include "fp4moe/checkpoint.hpp"
#include "progress.hpp"

namespace fp4moe::cli {
namespace {

struct QuantizeOptions {
  std::string in, out;
};

void quantize(const QuantizeOptions& o) {
  Progress bar("quantize");
  const QuantizeSummary s = quantize_checkpoint(o.in, o.out, [&](const QuantizeProgress& p) {
    bar.update(int(p.tensors_done), int(p.tensors_total), p.file);
  });
  fmt::print("fp4moe quantize: {} -> {}\n", o.in, o.out);
  fmt::print("  quantized  {} expert weight tensors to NVFP4 (weight, weight_scale, weight_scale_2, input_scale)\n",
             s.quantized_tensors);
  fmt::print("  copied     {} other tensors unchanged\n", s.copied_tensors);
  fmt::print("  size       {:.1f} MiB of tensors in, {:.1f} MiB out\n", double(s.bytes_in) / (1 << 20),
             double(s.bytes_out) / (1 << 20));
  fmt::print("  files      {}\n", fmt::join(s.files, ", "));
}

}  // namespace

void register_quantize(CLI::App& app) {
  static QuantizeOptions o;
  auto* cmd = app.add_subcommand("quantize", "Quantize a bf16/fp32 MoE checkpoint's experts to ModelOpt NVFP4");
  cmd->add_option("--in", o.in, "Input checkpoint directory (safetensors, config.json)")->required();
  cmd->add_option("--out", o.out, "Output directory (must not exist, or be empty)")->required();
  cmd->callback([] { quantize(o); });
}

}  // namespace fp4moe::cli
