#include "plan/arch.hpp"

#include <array>
#include <cctype>
#include <string>

#include "fp4moe/error.hpp"

namespace fp4moe::plan {
namespace {
// Opt-in per block / per SM / reserved per block, from the CUDA programming
// guide's compute-capability tables (measured on the H200: 232448 / 233472 / 1024).
constexpr std::array kArchs = {
    Arch{"sm_80", 80, 166912, 167936, 1024, false, false},
    Arch{"sm_86", 86, 101376, 102400, 1024, false, false},
    Arch{"sm_89", 89, 101376, 102400, 1024, false, false},
    Arch{"sm_90", 90, 232448, 233472, 1024, true, false},
    Arch{"sm_100", 100, 232448, 233472, 1024, false, true},
    Arch{"sm_103", 103, 232448, 233472, 1024, false, true},
    Arch{"sm_120", 120, 101376, 102400, 1024, false, true},
    Arch{"sm_121", 121, 101376, 102400, 1024, false, true},
};
}  // namespace

std::span<const Arch> all_archs() { return kArchs; }

const Arch* find_arch_by_cc(int cc) {
  for (const Arch& a : kArchs)
    if (a.cc == cc) return &a;
  return nullptr;
}

bool SmemBudget::has_wgmma() const {
  const Arch* a = find_arch_by_cc(cc);
  return a && a->has_wgmma;
}

const Arch& find_arch(std::string_view name) {
  std::string digits;
  for (char c : name) {
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
  }
  std::string lowered;
  for (char c : name) lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool ok_shape = !digits.empty() && digits.size() <= 3 &&
                        (lowered.rfind("sm", 0) == 0 || std::isdigit(static_cast<unsigned char>(lowered[0])));
  if (ok_shape) {
    if (const Arch* a = find_arch_by_cc(std::stoi(digits))) return *a;
  }
  std::string known;
  for (const Arch& a : kArchs) known += (known.empty() ? "" : ", ") + std::string(a.name);
  throw Error("unknown architecture '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace fp4moe::plan
