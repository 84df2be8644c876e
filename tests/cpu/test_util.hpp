// Helpers shared by the CPU tests.
#pragma once
#include <string>

#include "fp4moe/error.hpp"

namespace fp4moe::test {

// The message of the fp4moe::Error that fn throws, or "<no error>".
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace fp4moe::test
