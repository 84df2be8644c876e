// fp4moe reports every bad argument, file or configuration by throwing
// fp4moe::Error whose message names the bad value. Nothing in the library
// aborts or returns a silent status.
#pragma once
#include <stdexcept>
#include <string>

namespace fp4moe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A device allocation that did not fit: an Error naming the size asked for
// and what the device had free, which a caller may catch apart.
class OutOfDeviceMemory : public Error {
 public:
  using Error::Error;
};

}  // namespace fp4moe

// Host-boundary check: FP4MOE_CHECK(cond, "K = " << k << " is not a multiple of 16")
#include <sstream>
#define FP4MOE_CHECK(cond, msg)                                  \
  do {                                                           \
    if (!(cond)) {                                               \
      std::ostringstream fp4moe_check_os_;                       \
      fp4moe_check_os_ << msg;                                   \
      throw ::fp4moe::Error(fp4moe_check_os_.str());             \
    }                                                            \
  } while (0)
