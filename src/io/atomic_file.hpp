// Output that appears whole or not at all: a file (or directory) is built
// under a temporary name beside its destination and renamed into place on
// commit(); destroyed without commit() (an error on the way), the temporary
// is removed and the destination is left as it was.
#pragma once
#include <cstddef>
#include <string>

namespace fp4moe::io {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // throws naming the path when it cannot be created
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();  // flush to disk, then rename onto the destination

 private:
  std::string path_, temp_;
  int fd_ = -1;
};

// Writes `text` to `path` atomically.
void write_file_atomically(const std::string& path, const std::string& text);

// A directory built under a temporary name and renamed onto `path` on commit().
// `path` must not exist, or be an empty directory (never clobbers a checkpoint).
class AtomicDirectory {
 public:
  explicit AtomicDirectory(const std::string& path);
  ~AtomicDirectory();
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  const std::string& temp_path() const { return temp_; }  // where to write until commit()
  void commit();

 private:
  std::string path_, temp_;
  bool committed_ = false;
};

}  // namespace fp4moe::io
