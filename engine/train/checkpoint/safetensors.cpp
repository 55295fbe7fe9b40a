// safetensors writing and fully validated reading. The header is trusted for nothing: every
// field is type-checked and every offset checked against the file before any data is read, so a
// corrupt or hostile file gives a DataLoss error, never a crash or a huge allocation.
#include "engine/train/checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>

#include "engine/core/checksum.h"
#include "engine/core/output_file.h"
#include "engine/train/checkpoint/json_brief.h"
#include "engine/train/checkpoint/posix.h"

namespace tandem::train {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// safetensors' own reader refuses larger headers; so do we, before allocating one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr uint64_t kHeaderAlignment = 8;
constexpr std::string_view kMetadataKey = "__metadata__";
// __metadata__ key of a tensor's CRC32C (8 hex digits): other readers ignore it, ours verifies it.
constexpr std::string_view kCrcKeyPrefix = "tandem.crc32c.";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
// Ordered as safetensors orders data: largest alignment first (its Dtype enum, descending).
constexpr std::array<DTypeName, 6> kDTypes = {{{DType::kI64, "I64"},
                                               {DType::kF32, "F32"},
                                               {DType::kI32, "I32"},
                                               {DType::kBF16, "BF16"},
                                               {DType::kF16, "F16"},
                                               {DType::kU8, "U8"}}};
// Valid safetensors dtypes that Tandem has no tensor type for.
constexpr std::array<std::string_view, 9> kUnsupportedDTypes = {"BOOL", "I8",  "I16", "U16",    "U32",
                                                                 "U64",  "F64", "F8_E4M3", "F8_E5M2"};

size_t write_rank(DType dtype) {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (kDTypes[i].dtype == dtype) return i;
  }
  throw_error(ErrorCode::kInternal, "dtype {} has no safetensors name", dtype_name(dtype));
}

// Throws DataLoss prefixed with the file (and the tensor, when there is one).
class Validator {
 public:
  explicit Validator(const std::filesystem::path& path) : path_(path) {}

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw_error(ErrorCode::kDataLoss, "safetensors file '{}': {}", path_.string(),
                fmt::format(format, std::forward<Args>(args)...));
  }
  // A valid file Tandem cannot represent: Unimplemented rather than DataLoss.
  template <typename... Args>
  [[noreturn]] void unsupported(const std::string& name, fmt::format_string<Args...> format, Args&&... args) const {
    throw_error(ErrorCode::kUnimplemented, "safetensors file '{}': tensor '{}': {}", path_.string(), name,
                fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  [[noreturn]] void fail_tensor(const std::string& name, fmt::format_string<Args...> format, Args&&... args) const {
    fail("tensor '{}': {}", name, fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  const std::filesystem::path& path_;
};

DType parse_entry_dtype(const Validator& v, const std::string& name, const nlohmann::json& j) {
  if (!j.is_string()) v.fail_tensor(name, "\"dtype\" is {}, not a string", json_brief(j));
  const auto& s = j.get_ref<const std::string&>();
  for (const auto& d : kDTypes) {
    if (d.name == s) return d.dtype;
  }
  if (std::find(kUnsupportedDTypes.begin(), kUnsupportedDTypes.end(), s) != kUnsupportedDTypes.end()) {
    v.unsupported(name, "dtype {} is valid safetensors but Tandem has no such tensor type (it reads F32, BF16, "
                  "F16, I32, I64, U8)", s);
  }
  v.fail_tensor(name, "unknown dtype {}", json_brief(j));
}

Shape parse_entry_shape(const Validator& v, const std::string& name, const nlohmann::json& j) {
  if (!j.is_array()) v.fail_tensor(name, "\"shape\" is {}, not an array", json_brief(j));
  std::vector<int64_t> dims;
  for (const auto& d : j) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      v.fail_tensor(name, "shape {} holds {}, not a non-negative integer", json_brief(j), json_brief(d));
    }
    dims.push_back(d.get<int64_t>());
  }
  if (dims.size() > static_cast<size_t>(Shape::kMaxRank)) {
    v.unsupported(name, "shape [{}] has rank {}; Tandem tensors have at most {}", fmt::join(dims, ", "), dims.size(),
                  Shape::kMaxRank);
  }
  return Shape(std::span<const int64_t>(dims));
}

SafetensorsEntry parse_entry(const Validator& v, const std::string& name, const nlohmann::json& j,
                             uint64_t data_size) {
  if (!j.is_object()) v.fail_tensor(name, "entry is {}, not an object", json_brief(j));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(key)) v.fail_tensor(name, "entry has no \"{}\"", key);
  }
  SafetensorsEntry e;
  e.name = name;
  e.dtype = parse_entry_dtype(v, name, j["dtype"]);
  e.shape = parse_entry_shape(v, name, j["shape"]);
  const auto& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    v.fail_tensor(name, "\"data_offsets\" is {}, not [begin, end] of non-negative integers", json_brief(off));
  }
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) v.fail_tensor(name, "data_offsets [{}, {}] end before they begin", e.begin, e.end);
  if (e.end > data_size) {
    v.fail_tensor(name, "data_offsets [{}, {}] run past the end of the data section ({} bytes)", e.begin, e.end,
                  data_size);
  }
  uint64_t bytes = dtype_size(e.dtype);
  for (int64_t d : e.shape.dims()) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      v.fail_tensor(name, "shape {} overflows a 64-bit byte count", e.shape.str());
    }
  }
  if (bytes != e.end - e.begin) {
    v.fail_tensor(name, "data_offsets [{}, {}] span {} bytes but {} x {} needs {}", e.begin, e.end, e.end - e.begin,
                  safetensors_dtype_name(e.dtype), e.shape.str(), bytes);
  }
  return e;
}

// The data must be tiled exactly: sorted by offset, each tensor starts where the previous ends.
void check_coverage(const Validator& v, std::vector<SafetensorsEntry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& e : entries) {
    if (e.begin < covered) {
      v.fail_tensor(e.name, "data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", e.begin, e.end, previous->name,
                    previous->begin, previous->end);
    }
    if (e.begin > covered) {
      v.fail_tensor(e.name, "data_offsets [{}, {}] leave bytes [{}, {}) of the data section to no tensor", e.begin,
                    e.end, covered, e.begin);
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size) {
    v.fail("the tensors cover {} bytes but the data section holds {}: trailing bytes after the last tensor",
           covered, data_size);
  }
}

SafetensorsMetadata parse_metadata(const Validator& v, const nlohmann::json& j) {
  if (!j.is_object()) v.fail("\"__metadata__\" is {}, not an object of strings", json_brief(j));
  SafetensorsMetadata out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) v.fail("\"__metadata__\" entry '{}' is {}, not a string", key, json_brief(value));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

SafetensorsHeader parse_header(const Validator& v, const std::string& text, uint64_t data_start,
                               uint64_t file_size) {
  if (text.empty() || text.front() != '{') v.fail("the header does not start with '{{'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    v.fail("the header is not valid JSON: {}", e.what());
  }
  if (!j.is_object()) v.fail("the header is not a JSON object");
  SafetensorsHeader h;
  h.data_start = data_start;
  h.file_size = file_size;
  uint64_t data_size = file_size - data_start;
  for (const auto& [key, value] : j.items()) {
    if (key == kMetadataKey) {
      h.metadata = parse_metadata(v, value);
    } else {
      h.entries.push_back(parse_entry(v, key, value, data_size));
    }
  }
  check_coverage(v, h.entries, data_size);
  return h;
}

SafetensorsHeader read_header(const posix::File& file) {
  Validator v(file.path());
  uint64_t size = file.size();
  if (size < 8) v.fail("the file is {} bytes, too short for the 8-byte header length", size);
  uint64_t n = 0;
  file.read_at(&n, sizeof(n), 0);
  if (n > kMaxHeaderBytes) {
    v.fail("header length {} exceeds the {}-byte limit: a corrupt length or not a safetensors file", n,
           kMaxHeaderBytes);
  }
  if (n > size - 8) v.fail("header length {} runs past the end of the file ({} bytes)", n, size);
  std::string text(n, '\0');
  file.read_at(text.data(), n, 8);
  return parse_header(v, text, 8 + n, size);
}

std::string make_header(const std::vector<std::pair<const std::string*, const Tensor*>>& order,
                        const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) j[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    nlohmann::ordered_json e;
    e["dtype"] = safetensors_dtype_name(t->dtype());
    e["shape"] = std::vector<int64_t>(t->shape().dims().begin(), t->shape().dims().end());
    e["data_offsets"] = {offset, offset + t->nbytes()};
    offset += t->nbytes();
    j[*name] = std::move(e);
  }
  std::string text = j.dump();
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  return text;
}

// A tensor whose stored CRC32C (written by write_safetensors; files from other writers have none)
// disagrees with its bytes is DataLoss naming the file and the tensor.
void verify_crc(const std::filesystem::path& path, const SafetensorsMetadata& metadata, const std::string& name,
                const Tensor& t) {
  auto it = metadata.find(std::string(kCrcKeyPrefix) + name);
  if (it == metadata.end()) return;
  const std::string computed = fmt::format("{:08x}", checksum_crc32c(t.raw_data(), t.nbytes()));
  TANDEM_CHECK(computed == it->second, ErrorCode::kDataLoss,
               "'{}': tensor '{}' ({}) fails its checksum (CRC32C stored {}, computed {}): the file is damaged; "
               "resume from another checkpoint (checkpoint.resume: a step directory) or save it again",
               path.string(), name, t.describe(), it->second, computed);
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) { return kDTypes[write_rank(dtype)].name; }

void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const SafetensorsMetadata& metadata) {
  TANDEM_CHECK(!metadata.contains(std::string(kMetadataKey)) && !tensors.contains(std::string(kMetadataKey)),
               ErrorCode::kInvalidArgument, "write_safetensors '{}': the name {} is reserved", path.string(),
               kMetadataKey);
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, t] : tensors) {
    TANDEM_CHECK(t.defined(), ErrorCode::kInvalidArgument, "write_safetensors '{}': tensor '{}' is undefined",
                 path.string(), name);
    order.emplace_back(&name, &t);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return write_rank(a.second->dtype()) < write_rank(b.second->dtype());  // names stay sorted within a dtype
  });
  // PyTorch's safetensors writes logical order; a channels_last or device tensor goes via a host
  // copy, made once: it is both checksummed (the CRCs go in the header, before the data) and written.
  std::vector<Tensor> host;
  SafetensorsMetadata with_crcs = metadata;
  for (const auto& [name, t] : order) {
    host.push_back(t->to(Device::cpu()).to_format(MemoryFormat::kContiguous));
    with_crcs[std::string(kCrcKeyPrefix) + *name] =
        fmt::format("{:08x}", checksum_crc32c(host.back().raw_data(), host.back().nbytes()));
  }
  std::string header = make_header(order, with_crcs);
  uint64_t n = header.size();
  OutputFile file(path, "write_safetensors");
  file.write(&n, sizeof(n));
  file.write(header.data(), header.size());
  for (const Tensor& t : host) {
    if (t.nbytes() > 0) file.write(t.raw_data(), t.nbytes());
  }
  file.commit();
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  return read_header(posix::File::open_read(path));
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  posix::File file = posix::File::open_read(path);
  SafetensorsHeader h = read_header(file);
  SafetensorsFile out;
  for (const auto& e : h.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (t.nbytes() > 0) file.read_at(t.raw_data(), t.nbytes(), h.data_start + e.begin);
    verify_crc(path, h.metadata, e.name, t);
    out.tensors.emplace(e.name, std::move(t));
  }
  // The checksums were for this reader; the caller gets the metadata it wrote.
  for (auto& [key, value] : h.metadata) {
    if (!key.starts_with(kCrcKeyPrefix)) out.metadata.emplace(key, std::move(value));
  }
  return out;
}

}  // namespace tandem::train
