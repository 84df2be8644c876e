// The tensors of a checkpoint, wherever they are stored: one .safetensors
// file, a directory with model.safetensors, or a directory whose
// model.safetensors.index.json maps each tensor to one of several shards.
// Typed reads check dtype and shape and name the tensor and its file.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace fp4moe::io {

inline constexpr const char* kIndexFileName = "model.safetensors.index.json";
inline constexpr const char* kSingleFileName = "model.safetensors";

// One tensor: where it is, what the header says, its bytes (unaligned).
struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
  const uint8_t* data() const { return file->data(*info); }
  std::string where() const;  // "tensor 'name' in FILE"
};

class TensorStore {
 public:
  // path: a .safetensors file, or a checkpoint directory (index or model.safetensors).
  static TensorStore open(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const;
  TensorRef get(const std::string& name) const;  // throws "PATH: no tensor 'name'"
  std::vector<std::string> names() const;        // sorted
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::pair<std::string, TensorRef>> index_;  // sorted by name
};

// ---- typed reads -----------------------------------------------------------------
void expect_dtype(const TensorRef& t, std::initializer_list<Dtype> allowed);
// `why` says where the expected shape comes from, e.g. "from config.json: [I, H/2]".
void expect_shape(const TensorRef& t, const std::vector<int64_t>& shape, const std::string& why);
std::vector<uint8_t> read_bytes(const TensorRef& t);
std::vector<float> read_floats(const TensorRef& t);         // F32, BF16 or F16, converted exactly
std::vector<uint16_t> read_bf16_bits(const TensorRef& t);   // BF16 as is, F32 rounded to nearest even
float read_scalar_f32(const TensorRef& t);                  // F32 of shape [] or [1]

}  // namespace fp4moe::io
