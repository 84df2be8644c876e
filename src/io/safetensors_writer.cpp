// write_safetensors: header JSON padded to 8 bytes, then the tensors' bytes in
// the order given, through an AtomicFile.
#include <set>

#include <nlohmann/json.hpp>

#include "fp4moe/error.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"

namespace fp4moe::io {

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string who = path + ": tensor '" + t.name + "'";
    FP4MOE_CHECK(t.name != "__metadata__", who << " uses the reserved name");
    FP4MOE_CHECK(names.insert(t.name).second, who << " is given twice");
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      FP4MOE_CHECK(d >= 0, who << " has a negative dimension in shape " << shape_string(t.shape));
      count *= static_cast<uint64_t>(d);
    }
    FP4MOE_CHECK(count * uint64_t(dtype_bytes(t.dtype)) == t.bytes,
                 who << " has " << t.bytes << " bytes, but " << dtype_name(t.dtype) << " " << shape_string(t.shape)
                     << " needs " << count * uint64_t(dtype_bytes(t.dtype)));
    FP4MOE_CHECK(t.data != nullptr || t.bytes == 0, who << " has no data");
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));

  AtomicFile f(path);
  f.write(length, 8);
  f.write(text.data(), text.size());
  for (const TensorToWrite& t : tensors)
    if (t.bytes) f.write(t.data, t.bytes);
  f.commit();
}

}  // namespace fp4moe::io
