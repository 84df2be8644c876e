// fp4moe: plan, run, benchmark and tune FP4 Mixture-of-Experts layers.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "fp4moe/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fp4moe: FP4 Mixture-of-Experts layers on NVIDIA GPUs, planned before launch"};
  app.require_subcommand(1);
  fp4moe::cli::register_info(app);
  fp4moe::cli::register_run(app);
  fp4moe::cli::register_plan(app);
  fp4moe::cli::register_tune(app);
  fp4moe::cli::register_bench(app);
  fp4moe::cli::register_quantize(app);
  fp4moe::cli::register_inspect(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fp4moe::Error& e) {
    std::fprintf(stderr, "fp4moe: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4moe: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
