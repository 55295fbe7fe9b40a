// IDX source. Both files are read whole (Fashion-MNIST's training images are 47 MB), after their
// headers say how much; zlib's gzread reads gzipped and plain files alike.
#include <zlib.h>

#include <algorithm>
#include <memory>

#include "data/convert/source.h"
#include "engine/core/error.h"

namespace tandem::data {

namespace {

uint32_t big_endian(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint8_t(s[at + 3]);
}

// An IDX file: the header's dimensions, and the whole file's bytes (header included).
struct IdxFile {
  std::vector<uint32_t> dims;
  std::string bytes;
};

// Reads up to `limit` bytes more into out; returns false at the end of the file.
bool read_some(gzFile f, const std::string& path, uint64_t limit, std::string* out) {
  char buf[1 << 16];
  const int n = gzread(f, buf, static_cast<unsigned>(std::min<uint64_t>(sizeof(buf), limit)));
  if (n < 0) {
    int err = 0;
    const char* msg = gzerror(f, &err);
    throw_error(ErrorCode::kDataLoss, "reading {} failed: {}", path, msg != nullptr ? msg : "");
  }
  out->append(buf, static_cast<size_t>(n));
  return n > 0;
}

// The header is read first, and the data only up to the size it states (one byte more to see a
// longer file): a .gz whose header says 1 image but inflates to gigabytes is an error, not a read.
IdxFile read_idx(const std::string& path, uint32_t want_ndim) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  TANDEM_CHECK(f != nullptr, ErrorCode::kNotFound, "cannot open IDX file {}", path);
  IdxFile idx;
  const uint64_t header = 4 + 4 * uint64_t{want_ndim};
  while (idx.bytes.size() < header && read_some(f.get(), path, header - idx.bytes.size(), &idx.bytes)) {
  }
  TANDEM_CHECK(idx.bytes.size() == header, ErrorCode::kDataLoss, "{} is too short for an IDX header", path);
  const uint32_t magic = big_endian(idx.bytes, 0);
  TANDEM_CHECK(magic == (0x0800u | want_ndim), ErrorCode::kDataLoss,
               "{}: IDX magic {:#010x}, expected {:#010x} (unsigned bytes, {} dimensions)", path, magic,
               0x0800u | want_ndim, want_ndim);
  constexpr uint64_t kMaxData = uint64_t{1} << 40;  // 1 TiB: beyond it the header is damaged
  uint64_t count = 1;
  for (uint32_t d = 0; d < want_ndim; ++d) {
    idx.dims.push_back(big_endian(idx.bytes, 4 + 4 * d));
    count = idx.dims.back() == 0 || count <= kMaxData / idx.dims.back() ? count * idx.dims.back() : kMaxData + 1;
  }
  TANDEM_CHECK(count <= kMaxData, ErrorCode::kDataLoss, "{}: the header's dimensions claim more than 1 TiB of data",
               path);
  const uint64_t want = header + count;
  while (idx.bytes.size() <= want && read_some(f.get(), path, want + 1 - idx.bytes.size(), &idx.bytes)) {
  }
  int err = Z_OK;
  const char* why = gzerror(f.get(), &err);
  // A .gz cut short reads as an early end; zlib says so (Z_BUF_ERROR).
  TANDEM_CHECK(err == Z_OK, ErrorCode::kDataLoss, "reading {} failed: {} (a truncated .gz?)", path,
               why != nullptr ? why : "");
  TANDEM_CHECK(idx.bytes.size() == want, ErrorCode::kDataLoss, "{}: the header says {} bytes of data, the file has {}",
               path, count, idx.bytes.size() > want ? "more" : std::to_string(idx.bytes.size() - header));
  return idx;
}

class IdxSource : public ConvertSource {
 public:
  IdxSource(const std::string& images_path, const std::string& labels_path)
      : IdxSource(read_idx(images_path, 3), read_idx(labels_path, 1), images_path, labels_path) {}

  IdxSource(IdxFile images, IdxFile labels, const std::string& images_path, const std::string& labels_path)
      : images_(std::move(images.bytes)), labels_(std::move(labels.bytes)) {
    const std::vector<uint32_t>& dims = images.dims;
    const std::vector<uint32_t>& label_dims = labels.dims;
    TANDEM_CHECK(dims[0] == label_dims[0], ErrorCode::kInvalidArgument, "{} holds {} images but {} holds {} labels",
                 images_path, dims[0], labels_path, label_dims[0]);
    count_ = dims[0];
    height_ = dims[1];
    width_ = dims[2];
  }

  size_t size() const override { return count_; }
  int64_t label(size_t i) const override { return static_cast<uint8_t>(labels_[8 + i]); }
  uint64_t estimated_bytes() const override { return uint64_t(count_) * (uint64_t(height_) * width_ + 100); }

  std::string record(size_t i) const override {
    const size_t pixels = size_t(height_) * width_;
    FeatureMap f;
    f["image/encoded"] = Feature::of_bytes({images_.substr(16 + i * pixels, pixels)});
    f["image/format"] = Feature::of_bytes({"raw"});
    f["image/height"] = Feature::of_ints({height_});
    f["image/width"] = Feature::of_ints({width_});
    f["image/channels"] = Feature::of_ints({1});
    f["image/class/label"] = Feature::of_ints({label(i)});
    return serialize_example(f);
  }

 private:
  std::string images_, labels_;
  size_t count_ = 0;
  uint32_t height_ = 0, width_ = 0;
};

}  // namespace

std::unique_ptr<ConvertSource> open_idx_source(const std::string& images_path, const std::string& labels_path) {
  return std::make_unique<IdxSource>(images_path, labels_path);
}

}  // namespace tandem::data
