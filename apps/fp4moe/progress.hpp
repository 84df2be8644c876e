// Progress of long runs: a bar on a terminal, plain lines otherwise.
#pragma once
#include <cstdio>
#include <string>

#include <unistd.h>

namespace fp4moe::cli {

class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)), tty_(::isatty(::fileno(stdout)) != 0) {}
  void update(int done, int total, const std::string& item) {
    if (total <= 0) return;
    if (tty_) {
      const int width = 30, filled = done * width / total;
      std::printf("\r%s [%s%s] %d/%d %-48.48s", what_.c_str(), std::string(size_t(filled), '#').c_str(),
                  std::string(size_t(width - filled), '.').c_str(), done, total, item.c_str());
      if (done == total) std::printf("\n");
      std::fflush(stdout);
    } else if (done == total || done * 10 / total != (done - 1) * 10 / total) {
      std::printf("%s: %d/%d (%s)\n", what_.c_str(), done, total, item.c_str());
      std::fflush(stdout);
    }
  }

 private:
  std::string what_;
  bool tty_;
};

}  // namespace fp4moe::cli
