// Image-folder source: the bytes of each JPEG/PNG file go into image/encoded untouched;
// only the header is read, for height, width and channels (libjpeg-turbo for JPEG, the
// IHDR chunk for PNG). Files are read when their record is made, on the writer threads.
#include <turbojpeg.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "data/convert/source.h"
#include "engine/core/error.h"

namespace tandem::data {

namespace {

namespace fs = std::filesystem;

struct ImageInfo {
  int64_t height, width, channels;
  const char* format;
};

ImageInfo jpeg_info(const std::string& bytes, const std::string& path) {
  tjhandle tj = tjInitDecompress();
  TANDEM_CHECK(tj != nullptr, ErrorCode::kInternal, "tjInitDecompress failed: {}", tjGetErrorStr2(nullptr));
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  int rc = tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(bytes.data()),
                               static_cast<unsigned long>(bytes.size()), &width, &height, &subsamp, &colorspace);
  std::string why = rc != 0 ? tjGetErrorStr2(tj) : "";
  tjDestroy(tj);
  TANDEM_CHECK(rc == 0, ErrorCode::kDataLoss, "{} is not a readable JPEG: {}", path, why);
  int64_t channels = colorspace == TJCS_GRAY ? 1 : (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) ? 4 : 3;
  return {height, width, channels, "jpeg"};
}

ImageInfo png_info(const std::string& bytes, const std::string& path) {
  static const char kSignature[] = "\x89PNG\r\n\x1a\n";
  bool ok = bytes.size() >= 29 && bytes.compare(0, 8, kSignature, 8) == 0 && bytes.compare(12, 4, "IHDR") == 0;
  TANDEM_CHECK(ok, ErrorCode::kDataLoss, "{} is not a readable PNG (no signature and IHDR chunk)", path);
  auto be32 = [&](size_t at) {
    return int64_t(uint8_t(bytes[at])) << 24 | int64_t(uint8_t(bytes[at + 1])) << 16 | int64_t(uint8_t(bytes[at + 2])) << 8 |
           int64_t(uint8_t(bytes[at + 3]));
  };
  int color_type = static_cast<uint8_t>(bytes[25]);
  int64_t channels = color_type == 0 ? 1 : color_type == 4 ? 2 : color_type == 6 ? 4 : 3;  // 2 RGB, 3 palette
  return {be32(20), be32(16), channels, "png"};
}

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

class ImageFolderSource : public ConvertSource {
 public:
  explicit ImageFolderSource(const std::string& root) {
    TANDEM_CHECK(fs::is_directory(root), ErrorCode::kNotFound, "image folder {} does not exist", root);
    for (const auto& entry : fs::directory_iterator(root)) {
      if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
    }
    std::sort(classes_.begin(), classes_.end());
    TANDEM_CHECK(!classes_.empty(), ErrorCode::kInvalidArgument, "{} has no sub-folders: put each class's images in a "
                 "sub-folder named after the class", root);
    size_t ignored = 0;
    for (size_t c = 0; c < classes_.size(); ++c) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::recursive_directory_iterator(fs::path(root) / classes_[c])) {
        if (!entry.is_regular_file()) continue;
        std::string ext = lower_extension(entry.path());
        if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") {
          files.push_back(entry.path());
          bytes_ += entry.file_size() + 200;
        } else {
          ++ignored;
        }
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) items_.push_back({f.string(), static_cast<int64_t>(c)});
    }
    if (ignored > 0) spdlog::warn("{}: {} files that are not .jpg/.jpeg/.png were left out", root, ignored);
  }

  size_t size() const override { return items_.size(); }
  int64_t label(size_t i) const override { return items_[i].label; }
  std::string class_name(int64_t label) const override { return classes_[static_cast<size_t>(label)]; }
  uint64_t estimated_bytes() const override { return bytes_; }

  std::string record(size_t i) const override {
    const std::string& path = items_[i].path;
    std::ifstream in(path, std::ios::binary);
    TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "cannot open image {}", path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string bytes = ss.str();
    ImageInfo info = lower_extension(path) == ".png" ? png_info(bytes, path) : jpeg_info(bytes, path);
    FeatureMap f;
    f["image/encoded"] = Feature::of_bytes({std::move(bytes)});
    f["image/format"] = Feature::of_bytes({info.format});
    f["image/height"] = Feature::of_ints({info.height});
    f["image/width"] = Feature::of_ints({info.width});
    f["image/channels"] = Feature::of_ints({info.channels});
    f["image/class/label"] = Feature::of_ints({items_[i].label});
    f["image/class/text"] = Feature::of_bytes({classes_[static_cast<size_t>(items_[i].label)]});
    f["image/filename"] = Feature::of_bytes({fs::path(path).filename().string()});
    return serialize_example(f);
  }

 private:
  struct Item {
    std::string path;
    int64_t label;
  };
  std::vector<std::string> classes_;
  std::vector<Item> items_;
  uint64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<ConvertSource> open_image_folder_source(const std::string& root) {
  return std::make_unique<ImageFolderSource>(root);
}

}  // namespace tandem::data
