// fp4moe inspect PATH: what a checkpoint or .safetensors file holds, and what
// fp4moe would do with it.
#include <fmt/core.h>

#include "commands.hpp"
#include "fp4moe/checkpoint.hpp"

namespace fp4moe::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool every_tensor = false;
};

}  // namespace

void register_inspect(CLI::App& app) {
  static InspectOptions o;
  auto* cmd = app.add_subcommand("inspect", "List what a checkpoint (directory) or .safetensors file holds");
  cmd->add_option("path", o.path, "Checkpoint directory or .safetensors file")->required();
  cmd->add_flag("--tensors", o.every_tensor, "List every tensor instead of grouping names by their numbers");
  cmd->callback([] {
    for (const std::string& line : inspect_checkpoint(o.path, o.every_tensor).lines) fmt::print("{}\n", line);
  });
}

}  // namespace fp4moe::cli
