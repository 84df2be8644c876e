// fp4moe's version (the CMake project version says the same): recorded in tune
// caches (a cache section of another version is never used) and in files fp4moe writes.
#pragma once

namespace fp4moe {

inline constexpr const char* kVersion = "0.2.0";

}  // namespace fp4moe
