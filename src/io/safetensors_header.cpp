// Parsing and validating a safetensors header. This file is the libFuzzer
// target's whole surface (tests/fuzz): it depends on nlohmann-json and
// error.hpp only, and turns every failure into fp4moe::Error.
#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fp4moe/error.hpp"
#include "io/safetensors.hpp"

namespace fp4moe::io {
namespace {

using json = nlohmann::json;

struct DtypeEntry {
  Dtype dtype;
  const char* name;
  int64_t bytes;
};
constexpr std::array<DtypeEntry, 15> kDtypes{{
    {Dtype::BOOL, "BOOL", 1}, {Dtype::U8, "U8", 1},     {Dtype::I8, "I8", 1},     {Dtype::F8_E4M3, "F8_E4M3", 1},
    {Dtype::F8_E5M2, "F8_E5M2", 1}, {Dtype::U16, "U16", 2}, {Dtype::I16, "I16", 2}, {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2}, {Dtype::U32, "U32", 4},   {Dtype::I32, "I32", 4},   {Dtype::F32, "F32", 4},
    {Dtype::U64, "U64", 8},   {Dtype::I64, "I64", 8},   {Dtype::F64, "F64", 8},
}};

const DtypeEntry& entry(Dtype d) {
  for (const DtypeEntry& e : kDtypes)
    if (e.dtype == d) return e;
  throw Error("safetensors: dtype code " + std::to_string(static_cast<int>(d)) + " is not known");
}

// Nesting deeper than a tensor entry's arrays (depth 3) is never valid; refusing
// it while parsing keeps hostile headers from building deep trees.
constexpr int kMaxJsonDepth = 3;

json parse_header_json(const uint8_t* begin, uint64_t length, const std::string& file) {
  std::set<std::string> top_keys;
  std::string duplicate;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw Error(file + ": safetensors header nests deeper than a tensor entry");
    if (event == json::parse_event_t::key && depth == 1 && !top_keys.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(begin, begin + length, check);
  } catch (const json::exception& e) {
    throw Error(file + ": safetensors header is not valid JSON (" + e.what() + ")");
  }
  FP4MOE_CHECK(duplicate.empty(), file << ": safetensors header names tensor '" << duplicate << "' twice");
  FP4MOE_CHECK(j.is_object(), file << ": safetensors header is not a JSON object");
  return j;
}

uint64_t read_offset(const json& v, const std::string& where) {
  FP4MOE_CHECK(v.is_number_unsigned(), where << " data_offsets entry " << v.dump() << " is not a non-negative integer");
  return v.get<uint64_t>();
}

TensorInfo parse_tensor(const std::string& name, const json& v, const std::string& file) {
  const std::string where = file + ": tensor '" + name + "'";
  FP4MOE_CHECK(v.is_object(), where << " is not a JSON object");
  FP4MOE_CHECK(v.contains("dtype") && v["dtype"].is_string(), where << " has no dtype string");
  FP4MOE_CHECK(v.contains("shape") && v["shape"].is_array(), where << " has no shape array");
  FP4MOE_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
               where << " has no data_offsets [begin, end]");
  TensorInfo t;
  t.name = name;
  const std::string dtype = v["dtype"].get<std::string>();
  const std::optional<Dtype> d = dtype_from_name(dtype);
  FP4MOE_CHECK(d.has_value(), where << " has unknown dtype '" << dtype << "'");
  t.dtype = *d;
  uint64_t count = 1;
  for (const json& dim : v["shape"]) {
    FP4MOE_CHECK(dim.is_number_unsigned() && dim.get<uint64_t>() <= uint64_t(INT64_MAX),
                 where << " shape entry " << dim.dump() << " is not a non-negative integer");
    t.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
    FP4MOE_CHECK(!__builtin_mul_overflow(count, dim.get<uint64_t>(), &count),
                 where << " shape " << shape_string(t.shape) << " has more elements than 2^64");
  }
  uint64_t nbytes = 0;
  FP4MOE_CHECK(!__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_bytes(t.dtype)), &nbytes),
               where << " shape " << shape_string(t.shape) << " x " << dtype << " is more than 2^64 bytes");
  t.begin = read_offset(v["data_offsets"][0], where);
  t.end = read_offset(v["data_offsets"][1], where);
  FP4MOE_CHECK(t.begin <= t.end, where << " data_offsets [" << t.begin << ", " << t.end << "] end before they begin");
  FP4MOE_CHECK(t.end - t.begin == nbytes, where << " holds " << t.end - t.begin << " bytes, but " << dtype << " "
                                                << shape_string(t.shape) << " needs " << nbytes);
  return t;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& file) {
  FP4MOE_CHECK(v.is_object(), file << ": __metadata__ is not a JSON object");
  std::map<std::string, std::string> m;
  for (auto it = v.begin(); it != v.end(); ++it) {
    FP4MOE_CHECK(it.value().is_string(), file << ": __metadata__ entry '" << it.key() << "' is not a string");
    m[it.key()] = it.value().get<std::string>();
  }
  return m;
}

// The tensors must tile the data section: sorted by offset, each begins where
// the previous one ended, and the last ends at the end of the file.
void check_coverage(const std::vector<TensorInfo>& tensors, uint64_t data_bytes, const std::string& file) {
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : order) {
    FP4MOE_CHECK(t->end <= data_bytes, file << ": tensor '" << t->name << "' data_offsets [" << t->begin << ", "
                                            << t->end << "] run past the data section's " << data_bytes
                                            << " bytes (file truncated?)");
    FP4MOE_CHECK(t->begin >= covered, file << ": tensor '" << t->name << "' data_offsets [" << t->begin << ", "
                                           << t->end << "] overlap tensor '" << previous->name << "' ["
                                           << previous->begin << ", " << previous->end << "]");
    FP4MOE_CHECK(t->begin == covered, file << ": bytes [" << covered << ", " << t->begin
                                           << ") of the data section belong to no tensor (before tensor '"
                                           << t->name << "')");
    covered = t->end;
    previous = t;
  }
  FP4MOE_CHECK(covered == data_bytes, file << ": the data section has " << data_bytes << " bytes but its tensors end at "
                                           << covered << " (" << data_bytes - covered
                                           << " trailing bytes belong to no tensor)");
}

}  // namespace

int64_t dtype_bytes(Dtype d) { return entry(d).bytes; }

const char* dtype_name(Dtype d) { return entry(d).name; }

std::optional<Dtype> dtype_from_name(std::string_view name) {
  for (const DtypeEntry& e : kDtypes)
    if (name == e.name) return e.dtype;
  return std::nullopt;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorInfo* SafetensorsLayout::find(std::string_view name) const {
  const auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                                   [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

SafetensorsLayout parse_safetensors(const uint8_t* bytes, uint64_t size, const std::string& file) {
  FP4MOE_CHECK(size >= 8, file << ": " << size << " bytes is too short for a safetensors file (8-byte header length)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  FP4MOE_CHECK(n <= size - 8, file << ": header length " << n << " is longer than the " << size - 8
                                   << " bytes after it (file truncated, or not safetensors)");
  FP4MOE_CHECK(n <= kMaxSafetensorsHeader, file << ": header length " << n << " exceeds the limit of "
                                                << kMaxSafetensorsHeader << " bytes");
  FP4MOE_CHECK(n >= 2 && bytes[8] == '{', file << ": the safetensors header does not start with '{'");
  const json j = parse_header_json(bytes + 8, n, file);

  SafetensorsLayout layout;
  layout.header_bytes = n;
  layout.data_start = 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__")
      layout.metadata = parse_metadata(it.value(), file);
    else
      layout.tensors.push_back(parse_tensor(it.key(), it.value(), file));
  }
  // nlohmann's object keeps keys sorted, so tensors are sorted by name already.
  check_coverage(layout.tensors, size - layout.data_start, file);
  return layout;
}

}  // namespace fp4moe::io
