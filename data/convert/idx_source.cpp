// IDX source. Both files are read whole (Fashion-MNIST's training images are 47 MB); zlib's
// gzread reads gzipped and plain files alike.
#include <zlib.h>

#include "data/convert/source.h"
#include "engine/core/error.h"

namespace tandem::data {

namespace {

std::string read_maybe_gzipped(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  TANDEM_CHECK(f != nullptr, ErrorCode::kNotFound, "cannot open IDX file {}", path);
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string message = msg != nullptr ? msg : "";
  gzclose(f);
  TANDEM_CHECK(n == 0 && err == Z_OK, ErrorCode::kDataLoss, "reading {} failed: {}", path, message);
  return out;
}

uint32_t big_endian(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint8_t(s[at + 3]);
}

// Checks the magic (0x00 0x00 type=0x08 ndim) and returns the dimensions.
std::vector<uint32_t> idx_dims(const std::string& bytes, const std::string& path, uint32_t want_ndim) {
  TANDEM_CHECK(bytes.size() >= 4 + 4 * want_ndim, ErrorCode::kDataLoss, "{} is too short for an IDX header", path);
  uint32_t magic = big_endian(bytes, 0);
  TANDEM_CHECK(magic == (0x0800u | want_ndim), ErrorCode::kDataLoss,
               "{}: IDX magic {:#010x}, expected {:#010x} (unsigned bytes, {} dimensions)", path, magic,
               0x0800u | want_ndim, want_ndim);
  std::vector<uint32_t> dims;
  uint64_t count = 1;
  for (uint32_t d = 0; d < want_ndim; ++d) {
    dims.push_back(big_endian(bytes, 4 + 4 * d));
    count *= dims.back();
  }
  TANDEM_CHECK(bytes.size() == 4 + 4 * want_ndim + count, ErrorCode::kDataLoss,
               "{}: the header says {} bytes of data, the file has {}", path, count, bytes.size() - 4 - 4 * want_ndim);
  return dims;
}

class IdxSource : public ConvertSource {
 public:
  IdxSource(const std::string& images_path, const std::string& labels_path)
      : images_(read_maybe_gzipped(images_path)), labels_(read_maybe_gzipped(labels_path)) {
    std::vector<uint32_t> dims = idx_dims(images_, images_path, 3);
    std::vector<uint32_t> label_dims = idx_dims(labels_, labels_path, 1);
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
