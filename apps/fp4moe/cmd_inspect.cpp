// fp4moe inspect PATH: what a checkpoint or .safetensors file holds, and what
// fp4moe would do with it.
#include <cstdio>

#include <fmt/core.h>

#include "commands.hpp"
#include "fp4moe/checkpoint.hpp"
#include "fp4moe/error.hpp"

namespace fp4moe::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool every_tensor = false;
  int64_t layer = -1;
};

}  // namespace

void register_inspect(CLI::App& app) {
  static InspectOptions o;
  auto* cmd = app.add_subcommand("inspect", "List what a checkpoint (directory) or .safetensors file holds");
  cmd->add_option("path", o.path, "Checkpoint directory or .safetensors file")->required();
  cmd->add_flag("--tensors", o.every_tensor, "List every tensor instead of grouping names by their numbers");
  cmd->add_option("--layer", o.layer, "Check only this MoE layer (default: every one)")->check(CLI::NonNegativeNumber);
  cmd->callback([] {
    const CheckpointSummary s = inspect_checkpoint(o.path, o.every_tensor, o.layer);
    for (const std::string& line : s.lines) fmt::print("{}\n", line);
    std::fflush(stdout);
    // a checkpoint fp4moe cannot use is an error: the exit status says so
    if (!s.usable()) throw Error(o.path + ": " + std::to_string(s.problems.size()) + " problem(s), listed above");
  });
}

}  // namespace fp4moe::cli
