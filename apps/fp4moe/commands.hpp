// One file per CLI command; each registers its subcommand and its handler.
#pragma once
#include <CLI/CLI.hpp>

namespace fp4moe::cli {

void register_info(CLI::App& app);
void register_run(CLI::App& app);
void register_plan(CLI::App& app);
void register_tune(CLI::App& app);
void register_bench(CLI::App& app);
void register_quantize(CLI::App& app);
void register_inspect(CLI::App& app);

}  // namespace fp4moe::cli
