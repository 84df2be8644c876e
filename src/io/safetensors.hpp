// The safetensors file format (https://huggingface.co/docs/safetensors):
//
//   8 bytes   N, little-endian uint64: the header's length
//   N bytes   JSON object: {"name": {"dtype": "BF16", "shape": [2, 3],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
//   the rest  the data section; offsets are relative to its start
//
// parse_safetensors checks everything the header claims against the bytes
// it is given, with the rules of the safetensors package itself (the tensors
// cover the data section exactly: no overlap, no gap, nothing past the end),
// so a file that passes can be read without another bounds check. Every
// problem is an fp4moe::Error naming the file, the tensor and the values.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4moe::io {

enum class Dtype : uint8_t { BOOL, U8, I8, F8_E4M3, F8_E5M2, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

int64_t dtype_bytes(Dtype d);
const char* dtype_name(Dtype d);
std::optional<Dtype> dtype_from_name(std::string_view name);

std::string shape_string(const std::vector<int64_t>& shape);  // "[2, 3]"; "[]" for a scalar

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::U8;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;        // product of shape (1 for a scalar)
  uint64_t bytes() const { return end - begin; }
};

struct SafetensorsLayout {
  uint64_t header_bytes = 0;  // N
  uint64_t data_start = 0;    // 8 + N: file offset of the data section
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  const TensorInfo* find(std::string_view name) const;  // null when absent
};

// The largest header accepted (the safetensors package's own limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// Validates a whole file's bytes (header and offsets; the data are not read).
// `file` names the source in error messages.
SafetensorsLayout parse_safetensors(const uint8_t* bytes, uint64_t size, const std::string& file);

// A tensor to write: the bytes are read, not owned, and must stay alive
// until write_safetensors returns.
struct TensorToWrite {
  std::string name;
  Dtype dtype = Dtype::U8;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t bytes = 0;  // must equal numel * dtype_bytes
};

// Writes a safetensors file atomically (a temporary file in the same
// directory, then rename): on any error nothing is left at `path` (an older
// file there stays as it was). The header is padded with spaces to a multiple
// of 8 bytes, as the safetensors package does; tensors are stored in the
// order given.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A safetensors file mapped read-only into memory and validated on open.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  const SafetensorsLayout& layout() const { return layout_; }
  const TensorInfo* find(std::string_view name) const { return layout_.find(name); }
  // The tensor's bytes (no alignment promised: copy with memcpy).
  const uint8_t* data(const TensorInfo& t) const { return base_ + layout_.data_start + t.begin; }

 private:
  void release();
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  SafetensorsLayout layout_;
};

}  // namespace fp4moe::io
