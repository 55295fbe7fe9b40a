// The cache file format (docs/PIPELINE.md, "Cache files"), little-endian:
//   header (40 bytes): magic "TNDMCACH", u32 version, u32 flags (0), u64 element count,
//                      u64 body bytes, u32 CRC32C of the 32 bytes before it, u32 zero
//   per element:       u64 payload length, u32 CRC32C of those 8 bytes, payload, u32 CRC32C of it
//   payload:           i64 record, u32 + text, u32 + file, u32 tensor count, and per tensor
//                      u8 dtype, u8 memory format, u8 rank, u8 zero, i64 dims[rank], the data
// The length has its own CRC so a damaged length is reported as such instead of sending the
// reader far past the end of the file.
#include "data/pipeline/cache_file.h"

#include <random>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <span>
#include <string_view>

#include "data/crc32c.h"
#include "engine/core/error.h"
#include "engine/core/output_file.h"

namespace tandem::data {
namespace {

static_assert(std::endian::native == std::endian::little, "cache files are written little-endian as in memory");

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'C', 'A', 'C', 'H'};

template <typename T>
void put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_string(std::string* out, const std::string& s) {
  put(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

void serialize(const Element& e, std::string* out) {
  out->clear();
  put(out, e.record);
  put_string(out, e.text);
  put_string(out, e.file);
  put(out, static_cast<uint32_t>(e.tensors.size()));
  for (const Tensor& t : e.tensors) {
    TANDEM_CHECK(t.defined() && t.device().is_cpu(), ErrorCode::kInvalidArgument,
                 "cache(filename): element {} of '{}' holds a tensor that is {}; cache before any copy to a device",
                 e.record, e.file, t.defined() ? t.describe() : std::string("undefined"));
    put(out, static_cast<uint8_t>(t.dtype()));
    put(out, static_cast<uint8_t>(t.format()));
    put(out, static_cast<uint8_t>(t.rank()));
    put(out, uint8_t{0});
    for (int64_t d : t.shape().dims()) put(out, d);
    out->append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
}

// Reads the payload back; any inconsistency is reported through `fail` with what was wrong.
class PayloadReader {
 public:
  explicit PayloadReader(std::string_view data) : data_(data) {}

  template <typename T>
  T get(const char* what) {
    T value{};
    std::memcpy(&value, take(sizeof(T), what).data(), sizeof(T));
    return value;
  }
  std::string get_string(const char* what) { return std::string(take(get<uint32_t>(what), what)); }
  std::string_view take(size_t size, const char* what) {
    if (size > data_.size() - pos_) throw_error(ErrorCode::kDataLoss, "the payload ends inside {}", what);
    std::string_view out = data_.substr(pos_, size);
    pos_ += size;
    return out;
  }
  bool done() const { return pos_ == data_.size(); }
  size_t left() const { return data_.size() - pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// The bytes of a tensor of this shape, checked before anything is allocated: a shape that a
// damaged (or crafted) file makes up must neither overflow Shape::numel nor ask for more
// memory than the payload holds. A zero dimension makes the tensor empty whatever the others.
size_t checked_nbytes(std::span<const int64_t> dims, DType dtype, size_t left) {
  bool empty = std::find(dims.begin(), dims.end(), 0) != dims.end();
  const uint64_t limit = (empty ? uint64_t{INT64_MAX} : left) / dtype_size(dtype);
  uint64_t numel = 1;
  for (int64_t d : dims) {
    if (d == 0) continue;
    TANDEM_CHECK(static_cast<uint64_t>(d) <= limit / numel, ErrorCode::kDataLoss,
                 "a tensor's shape [{}] does not fit the {} bytes left in the payload", fmt::join(dims, ", "),
                 left);
    numel *= static_cast<uint64_t>(d);
  }
  return empty ? 0 : static_cast<size_t>(numel) * dtype_size(dtype);
}

Tensor parse_tensor(PayloadReader& in) {
  auto dtype = in.get<uint8_t>("a tensor's dtype");
  auto format = in.get<uint8_t>("a tensor's memory format");
  auto rank = in.get<uint8_t>("a tensor's rank");
  in.get<uint8_t>("a tensor's header");
  TANDEM_CHECK(dtype <= static_cast<uint8_t>(DType::kU8) && format <= 1 && rank <= Shape::kMaxRank,
               ErrorCode::kDataLoss, "a tensor header is invalid (dtype {}, format {}, rank {})", dtype, format, rank);
  std::array<int64_t, Shape::kMaxRank> storage{};  // no allocation per tensor on replay
  std::span<int64_t> dims(storage.data(), rank);
  for (int64_t& d : dims) {
    d = in.get<int64_t>("a tensor's shape");
    TANDEM_CHECK(d >= 0, ErrorCode::kDataLoss, "a tensor has a negative dimension {}", d);
  }
  size_t nbytes = checked_nbytes(dims, static_cast<DType>(dtype), in.left());
  std::string_view data = in.take(nbytes, "a tensor's data");
  Tensor t = Tensor::empty(Shape{std::span<const int64_t>(dims)}, static_cast<DType>(dtype), Device::cpu(),
                           static_cast<MemoryFormat>(format));
  if (!data.empty()) std::memcpy(t.raw_data(), data.data(), data.size());  // an empty tensor may have no storage
  return t;
}

Element parse(std::string_view payload) {
  PayloadReader in(payload);
  Element e;
  e.record = in.get<int64_t>("the record index");
  e.text = in.get_string("the text");
  e.file = in.get_string("the file name");
  auto tensors = in.get<uint32_t>("the tensor count");
  for (uint32_t i = 0; i < tensors; ++i) e.tensors.push_back(parse_tensor(in));
  TANDEM_CHECK(in.done(), ErrorCode::kDataLoss, "the payload has bytes after its last tensor");
  return e;
}

std::string unique_temp_name(const std::string& path) {
  // Random too: a container's process often has the same pid every start, and a temporary that a
  // killed run left under the same name would stop every later run at the O_EXCL open.
  static std::atomic<uint64_t> counter{0};
  std::random_device random;
  return fmt::format("{}.tmp-{}-{}-{:08x}", path, ::getpid(), counter.fetch_add(1), random());
}

}  // namespace

CacheFileWriter::CacheFileWriter(std::string path) : path_(std::move(path)), temp_(unique_temp_name(path_)) {
  // "x": O_EXCL, so a file or symlink planted at the temporary name is never followed or truncated.
  file_ = std::fopen(temp_.c_str(), "wbx");
  TANDEM_CHECK(file_ != nullptr, ErrorCode::kNotFound,
               "cache file {}: cannot create {}: {}; make sure its folder exists and is writable, or change the "
               "cache path",
               path_, temp_, std::strerror(errno));
  write_header();  // a placeholder with count 0 until commit()
}

CacheFileWriter::~CacheFileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_.c_str());
  }
}

void CacheFileWriter::write(const void* data, size_t size) {
  if (std::fwrite(data, 1, size, file_) != size) {
    throw_error(ErrorCode::kResourceExhausted, "cache file {}: writing {} bytes to {} failed: {}; free disk space or "
                "change the cache path", path_, size, temp_, std::strerror(errno));
  }
}

void CacheFileWriter::write_header() {
  std::string header(kMagic, sizeof(kMagic));
  put(&header, kCacheFormatVersion);
  put(&header, uint32_t{0});
  put(&header, count_);
  put(&header, body_bytes_);
  put(&header, crc32c(header));
  put(&header, uint32_t{0});
  write(header.data(), header.size());
}

void CacheFileWriter::append(const Element& element) {
  serialize(element, &payload_);
  std::string frame;
  put(&frame, static_cast<uint64_t>(payload_.size()));
  put(&frame, crc32c(frame));
  write(frame.data(), frame.size());
  write(payload_.data(), payload_.size());
  uint32_t crc = crc32c(payload_);
  write(&crc, sizeof(crc));
  body_bytes_ += frame.size() + payload_.size() + sizeof(crc);
  ++count_;
}

void CacheFileWriter::commit() {
  TANDEM_CHECK(file_ != nullptr, ErrorCode::kFailedPrecondition, "cache file {}: committed twice", path_);
  // The header goes last, and the data reaches the disk before the rename makes it visible.
  bool ok = std::fseek(file_, 0, SEEK_SET) == 0;
  if (ok) write_header();
  ok = ok && std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  if (ok) {
    // Only a missing or regular file is replaced: never a folder, FIFO, device or symlink there.
    try {
      check_replaceable_output(path_, "cache file");
    } catch (const Error& e) {
      std::remove(temp_.c_str());
      throw_error(ErrorCode::kInvalidArgument, "cache file {}: completing it from {} failed: {}; change the cache path",
                  path_, temp_, e.what());
    }
  }
  if (!ok || std::rename(temp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    std::remove(temp_.c_str());
    throw_error(ErrorCode::kResourceExhausted, "cache file {}: completing it from {} failed: {}; free disk space or "
                "change the cache path", path_, temp_, std::strerror(err));
  }
}

std::unique_ptr<CacheFileReader> CacheFileReader::open(const std::string& path, std::string* why) {
  why->clear();
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    if (errno != ENOENT) *why = fmt::format("cannot open it: {}", std::strerror(errno));
    return nullptr;
  }
  char header[kCacheHeaderBytes] = {};
  size_t got = std::fread(header, 1, sizeof(header), file);
  uint32_t version = 0, crc = 0;
  uint64_t count = 0, body = 0;
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&count, header + 16, 8);
  std::memcpy(&body, header + 24, 8);
  std::memcpy(&crc, header + 32, 4);
  std::fseek(file, 0, SEEK_END);
  auto size = static_cast<uint64_t>(std::ftell(file));
  if (got < sizeof(header)) {
    *why = fmt::format("it holds {} bytes, less than a header", got);
  } else if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    *why = "it is not a Tandem cache file (wrong magic)";
  } else if (version != kCacheFormatVersion) {
    *why = fmt::format("it has format version {}, this build reads {}", version, kCacheFormatVersion);
  } else if (crc != crc32c(header, 32)) {
    *why = "its header is damaged (CRC mismatch)";
  } else if (size != kCacheHeaderBytes + body) {
    *why = fmt::format("it holds {} bytes but its header says {}: truncated or appended to", size,
                       kCacheHeaderBytes + body);
  }
  if (!why->empty()) {
    std::fclose(file);
    return nullptr;
  }
  std::fseek(file, static_cast<long>(kCacheHeaderBytes), SEEK_SET);
  return std::unique_ptr<CacheFileReader>(new CacheFileReader(path, file, count, kCacheHeaderBytes + body));
}

CacheFileReader::CacheFileReader(std::string path, std::FILE* file, uint64_t count, uint64_t end)
    : path_(std::move(path)), file_(file), count_(count), end_(end) {}

CacheFileReader::~CacheFileReader() { std::fclose(file_); }

void CacheFileReader::corrupt(const std::string& what) const {
  throw_error(ErrorCode::kDataLoss, "cache file {}: element {} at offset {}: {}; delete the file so the next pass "
              "rebuilds it from the input", path_, index_, element_offset_, what);
}

void CacheFileReader::read(void* data, size_t size, const char* what) {
  if (std::fread(data, 1, size, file_) != size) corrupt(fmt::format("the file ends inside {}", what));
  offset_ += size;
}

bool CacheFileReader::next(Element* out) {
  if (index_ >= count_) return false;
  element_offset_ = offset_;
  char frame[12];
  read(frame, sizeof(frame), "the length");
  uint64_t length = 0;
  uint32_t crc = 0;
  std::memcpy(&length, frame, 8);
  std::memcpy(&crc, frame + 8, 4);
  if (crc != crc32c(frame, 8)) corrupt("the length is damaged (CRC mismatch)");
  // A length with a valid CRC may still be made up: bound it by the body the header declared
  // (and the open checked against the file size) before allocating for it.
  const uint64_t left = end_ - offset_;
  if (left < sizeof(crc) || length > left - sizeof(crc)) {
    corrupt(fmt::format("its length {} runs past the end of the body ({} bytes left)", length, left));
  }
  payload_.resize(length);
  read(payload_.data(), length, "the payload");
  read(&crc, sizeof(crc), "the payload's CRC");
  if (crc != crc32c(payload_)) corrupt("the payload is damaged (CRC mismatch)");
  try {
    *out = parse(payload_);
  } catch (const Error& e) {
    corrupt(e.what());
  }
  ++index_;
  return true;
}

}  // namespace tandem::data
