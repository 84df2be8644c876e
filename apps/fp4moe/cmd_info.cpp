#include <fmt/core.h>

#include "commands.hpp"
#include "fp4moe/device.hpp"
#include "kernels/dependent_launch.hpp"
#include "plan/arch.hpp"
#include "plan/cutlass_blockscaled_model.hpp"
#include "common/cuda_check.hpp"

namespace fp4moe::cli {

namespace {
// The targets fp4moe plans for, with or without a GPU here (fp4moe plan --arch NAME).
void print_arch_table() {
  fmt::print("architectures fp4moe plans for (fp4moe plan --arch NAME):\n");
  fmt::print("  {:<7} {:>14} {:>11} {:>9}  {}\n", "arch", "smem opt-in", "smem/SM", "reserved", "CUTLASS block-scaled grouped GEMM model");
  for (const plan::Arch& a : plan::all_archs()) {
    const char* cutlass = plan::cutlass::is_sm100(a.cc)          ? "sm_100: NVFP4, 1-SM and 2-SM clusters"
                          : plan::cutlass::is_sm120_family(a.cc) ? "sm_120: NVFP4, MXFP4, MXFP8 x MXFP4"
                          : a.cc == 103                          ? "none (capacities only; the launcher triples CTA_K)"
                                                                 : "none";
    fmt::print("  {:<7} {:>14} {:>11} {:>9}  {}\n", a.name, a.smem_optin_per_block, a.smem_per_sm,
               a.smem_reserved_per_block, cutlass);
  }
}
}  // namespace

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "List the CUDA devices and their shared-memory limits, and the architectures "
                                         "fp4moe plans for");
  cmd->callback([] {
    print_arch_table();
    std::string why;
    const auto devices = list_devices(&why);
    if (devices.empty()) {
      fmt::print("no CUDA device found ({})\n", why);
      return;
    }
    for (const DeviceInfo& d : devices) {
      fmt::print("device {}: {}\n", d.index, d.name);
      fmt::print("  compute capability  sm_{}\n", d.cc);
      fmt::print("  SMs                 {}\n", d.sm_count);
      fmt::print("  smem opt-in/block   {} bytes\n", d.smem_optin_per_block);
      fmt::print("  smem per SM         {} bytes\n", d.smem_per_sm);
      fmt::print("  smem reserved/block {} bytes\n", d.smem_reserved_per_block);
      fmt::print("  memory              {:.1f} GiB, L2 {:.1f} MiB\n", d.global_mem_bytes / 1073741824.0,
                 d.l2_bytes / 1048576.0);
      fmt::print("  driver / runtime    {} / {}\n", d.driver_version, d.runtime_version);
      FP4MOE_CUDA_CHECK(cudaSetDevice(d.index));
      fmt::print("  dependent launch    {}\n", kernels::dependent_launch_available()
                                                   ? "on (kernels overlap their predecessor's tail)"
                                                   : "off (plain stream order: pre-sm_90, JIT code or FP4MOE_NO_PDL)");
      for (const std::string& diff : compare_with_arch_table(d))
        fmt::print("  note: differs from fp4moe's architecture table: {}\n", diff);
    }
  });
}

}  // namespace fp4moe::cli
