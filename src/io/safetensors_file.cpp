// SafetensorsFile: the whole file mapped read-only, its header validated on
// open (parse_safetensors), so every tensor's bytes lie inside the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "fp4moe/error.hpp"
#include "io/safetensors.hpp"

namespace fp4moe::io {

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FP4MOE_CHECK(fd >= 0, path << ": cannot open (" << std::strerror(errno) << ")");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw Error(path + ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    close(fd);
    FP4MOE_CHECK(p != MAP_FAILED, path << ": cannot map " << size_ << " bytes (" << std::strerror(mmap_errno) << ")");
    base_ = static_cast<const uint8_t*>(p);
  } else {
    close(fd);
  }
  try {
    layout_ = parse_safetensors(base_, size_, path);
  } catch (...) {
    release();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { release(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)),
      layout_(std::move(o.layout_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    layout_ = std::move(o.layout_);
  }
  return *this;
}

void SafetensorsFile::release() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
  base_ = nullptr;
  size_ = 0;
}

}  // namespace fp4moe::io
