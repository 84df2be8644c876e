// Temporary file or directory + rename: POSIX rename within one directory is
// atomic, so readers see the old destination or the complete new one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "fp4moe/error.hpp"
#include "io/atomic_file.hpp"

namespace fp4moe::io {
namespace {

namespace fs = std::filesystem;

// "dir/name" -> "dir/.name.partial-XXXXXX" (a trailing '/' is ignored).
std::string temp_template(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::string name = ".";
  name += p.filename().string();
  name += ".partial-XXXXXX";
  return (dir / name).string();
}

std::string os_error() { return std::strerror(errno); }

}  // namespace

AtomicFile::AtomicFile(const std::string& path) : path_(path), temp_(temp_template(path)) {
  FP4MOE_CHECK(!path.empty() && fs::path(path).has_filename(), "output path '" << path << "' names no file");
  FP4MOE_CHECK(!fs::is_directory(path), "output path '" << path << "' is a directory");
  std::vector<char> name(temp_.begin(), temp_.end());
  name.push_back('\0');
  fd_ = mkstemp(name.data());
  FP4MOE_CHECK(fd_ >= 0, "cannot write '" << path << "': creating a file in its directory failed (" << os_error() << ")");
  temp_ = name.data();
  fchmod(fd_, 0644);  // mkstemp makes 0600; outputs are ordinary files
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(temp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  FP4MOE_CHECK(fd_ >= 0, "cannot write '" << path_ << "': the file is already committed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    FP4MOE_CHECK(n > 0, "cannot write '" << path_ << "': " << (n < 0 ? os_error() : "no progress"));
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  FP4MOE_CHECK(fd_ >= 0, "cannot write '" << path_ << "': the file is already committed");
  FP4MOE_CHECK(fsync(fd_) == 0, "cannot write '" << path_ << "': fsync failed (" << os_error() << ")");
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0 || rename(temp_.c_str(), path_.c_str()) != 0) {
    const std::string why = os_error();
    unlink(temp_.c_str());
    throw Error("cannot write '" + path_ + "': " + why);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

AtomicDirectory::AtomicDirectory(const std::string& path) : path_(path) {
  std::error_code ec;
  FP4MOE_CHECK(!fs::exists(path, ec) || (fs::is_directory(path, ec) && fs::is_empty(path, ec)),
               "output directory '" << path << "' exists and is not empty (it is never overwritten)");
  const std::string t = temp_template(path);
  std::vector<char> name(t.begin(), t.end());
  name.push_back('\0');
  FP4MOE_CHECK(mkdtemp(name.data()) != nullptr,
               "cannot create output directory '" << path << "': " << os_error());
  temp_ = name.data();
}

AtomicDirectory::~AtomicDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);  // best effort: the destructor must not throw
}

void AtomicDirectory::commit() {
  // rename() replaces an empty directory at the destination, or creates it.
  if (rename(temp_.c_str(), path_.c_str()) != 0)
    throw Error("cannot create output directory '" + path_ + "': " + os_error());
  committed_ = true;
}

}  // namespace fp4moe::io
