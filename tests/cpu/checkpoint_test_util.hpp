// Shared by the checkpoint and safetensors tests: temporary directories,
// small files, error capture.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fp4moe/error.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_store.hpp"
#include "test_util.hpp"

namespace fp4moe::test {

// A fresh directory under the system's temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "fp4moe-test-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// Files (and directories) in `dir`, to check that nothing was left behind.
inline std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// The tensors of a checkpoint's model.safetensors, to edit and write back.
struct Stored {
  io::Dtype dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
inline void rewrite(const std::string& dir, const std::function<void(std::map<std::string, Stored>&)>& edit) {
  std::map<std::string, Stored> t;
  {
    const io::TensorStore store = io::TensorStore::open(dir);
    for (const std::string& n : store.names()) {
      const io::TensorRef r = store.get(n);
      t[n] = Stored{r.info->dtype, r.info->shape, io::read_bytes(r)};
    }
  }
  edit(t);
  std::vector<io::TensorToWrite> out;
  for (const auto& [name, s] : t) out.push_back({name, s.dtype, s.shape, s.bytes.data(), s.bytes.size()});
  io::write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), out);
}

}  // namespace fp4moe::test

#define EXPECT_ERROR_CONTAINS(statement, text)                                  \
  do {                                                                          \
    const std::string fp4moe_err_ = ::fp4moe::test::error_of([&] { statement; }); \
    EXPECT_NE(fp4moe_err_.find(text), std::string::npos) << fp4moe_err_;         \
  } while (0)
