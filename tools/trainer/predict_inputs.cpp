// trainer predict's inputs: paths expanded and told apart by their bytes, images and records run through
// the data pipeline's image map with the run's evaluation settings, and batched as the model takes them.
#include "tools/trainer/predict_inputs.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/compression.h"
#include "data/example.h"
#include "data/example_fast.h"
#include "data/pipeline/image_decode.h"
#include "engine/core/error.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kWhatToGive = "give JPEG or PNG files, a folder of them, or TFRecord files";

bool has_image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The first `count` bytes of a file (fewer when it is shorter).
std::string read_head(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "predict: cannot open {}: {} (check its permissions)", path,
               std::strerror(errno));
  std::string head(count, '\0');
  in.read(head.data(), static_cast<std::streamsize>(count));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "predict: cannot open {}: {} (check its permissions)", path,
               std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TANDEM_CHECK(!in.bad(), ErrorCode::kDataLoss, "predict: reading {} failed: {}", path, std::strerror(errno));
  return bytes;
}

// By content, not by name: a .jpg that is really a PNG still decodes, and a TFRecord may be
// called anything. nullopt when the bytes are neither an image nor a TFRecord.
std::optional<PredictInput::Kind> sniff_kind(const std::string& path, const std::string& head) {
  const data::ImageFormat format = data::sniff_image_format(head);
  if (format == data::ImageFormat::kJpeg || format == data::ImageFormat::kPng) return PredictInput::Kind::kImage;
  bool certain = false;
  data::detect_file_compression(path, &certain);
  if (certain) return PredictInput::Kind::kTFRecord;
  return std::nullopt;
}

std::string hex_bytes(std::string_view bytes) {
  std::vector<std::string> out;
  for (unsigned char c : bytes.substr(0, 8)) out.push_back(fmt::format("{:02x}", c));
  return fmt::format("{}", fmt::join(out, " "));
}

PredictInput classify_file(const std::string& path) {
  data::check_regular_file(path);
  const std::string head = read_head(path, 16);
  TANDEM_CHECK(!head.empty(), ErrorCode::kInvalidArgument, "predict: {} is empty; {}", path, kWhatToGive);
  std::optional<PredictInput::Kind> kind = sniff_kind(path, head);
  TANDEM_CHECK(kind.has_value(), ErrorCode::kInvalidArgument,
               "predict: {} is neither a JPEG or PNG image nor a TFRecord file (it starts with bytes {}); {}", path,
               hex_bytes(head), kWhatToGive);
  return {path, *kind};
}

// A folder's images by name; its other files and sub-folders are left alone (a folder of
// images often holds a labels.txt or a README).
std::vector<PredictInput> expand_folder(const std::string& folder) {
  std::vector<std::string> images;
  size_t others = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    std::error_code ec;
    if (entry.is_regular_file(ec) && has_image_extension(entry.path())) {
      images.push_back(entry.path().string());
    } else {
      ++others;
    }
  }
  TANDEM_CHECK(!images.empty(), ErrorCode::kNotFound,
               "predict: folder {} holds no .jpg, .jpeg or .png file ({} other entr{}; sub-folders are not searched); "
               "put the images there, or name image or TFRecord files with --input",
               folder, others, others == 1 ? "y" : "ies");
  std::sort(images.begin(), images.end());
  std::vector<PredictInput> out;
  for (const std::string& path : images) {
    PredictInput input = classify_file(path);
    TANDEM_CHECK(input.kind == PredictInput::Kind::kImage, ErrorCode::kInvalidArgument,
                 "predict: {} in folder {} is named as an image but holds no JPEG or PNG data; remove it from the "
                 "folder or fix it",
                 path, folder);
    out.push_back(std::move(input));
  }
  return out;
}

std::string describe_size(const data::AugmentOptions& a) {
  return a.height > 0 && a.width > 0 ? fmt::format("resized to {} x {}", a.height, a.width)
                                     : std::string("decoded size kept");
}

// The message of an error the image map wrapped as "FILE record N: ...", without that prefix
// (for an image file, which has no records).
std::string without_record_prefix(const std::string& message, const std::string& file) {
  const std::string prefix = file + " record 0: ";
  return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
}

}  // namespace

std::vector<PredictInput> expand_predict_inputs(const std::vector<std::string>& paths) {
  std::vector<PredictInput> out;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    TANDEM_CHECK(fs::exists(status), ErrorCode::kNotFound, "predict: input {} does not exist; {}", path, kWhatToGive);
    if (fs::is_directory(status)) {
      std::vector<PredictInput> folder = expand_folder(path);
      out.insert(out.end(), folder.begin(), folder.end());
    } else {
      out.push_back(classify_file(path));
    }
  }
  return out;
}

Preprocessing make_preprocessing(const data::PipelineConfig& section, const std::string& name,
                                 const train::ModelConfig& model) {
  Preprocessing p{name, section, section.image, model};
  data::AugmentOptions& a = p.image.augment;
  TANDEM_CHECK(a.normalize, ErrorCode::kInvalidArgument,
               "predict: the run's {}.image.normalize is false, so its images would reach the model as bytes, which "
               "the model does not take; this checkpoint's config cannot have trained a model",
               name);
  // A padded random crop keeps the decoded size (the padding only shifts it): without the random
  // shift that is the decoded image as it is, which a resize to its own size gives bit for bit.
  if (a.crop_padding > 0) a.height = a.width = 0;
  a.crop_padding = 0;
  a.random_resized_crop = false;
  a.horizontal_flip = false;
  a.layout = model.channels_last ? data::ImageLayout::kNHWC : data::ImageLayout::kNCHW;
  // Labels are read apart from the map (PredictReader), so a record without one is still predicted.
  p.image.label_key.clear();
  p.image.num_classes = model.num_classes;
  return p;
}

std::string describe_preprocessing(const Preprocessing& p) {
  const data::AugmentOptions& a = p.image.augment;
  return fmt::format("{}.image: {}, {} channel(s), normalised with mean [{}] and std [{}], {} layout, no augmentation",
                     p.section, describe_size(a), a.channels, fmt::join(a.mean, ", "), fmt::join(a.std, ", "),
                     data::image_layout_name(a.layout));
}

PredictReader::PredictReader(std::vector<PredictInput> inputs, Preprocessing preprocessing)
    : inputs_(std::move(inputs)), preprocessing_(std::move(preprocessing)) {
  data::ImageMapOptions files = preprocessing_.image;
  files.format = data::ImageFormat::kAuto;  // a raw-record run still decodes JPEG and PNG files
  image_map_ = data::make_image_map(files);
  record_map_ = data::make_image_map(preprocessing_.image);
}

PredictReader::~PredictReader() = default;

std::vector<PredictItem> PredictReader::next(size_t count) {
  std::vector<PredictItem> items;
  PredictItem item;
  while (items.size() < count && next_one(&item)) {
    check_fits_model(item);
    items.push_back(std::move(item));
  }
  return items;
}

bool PredictReader::next_one(PredictItem* item) {
  for (;;) {
    if (records_) {
      std::string_view payload;
      bool more = false;
      try {
        more = records_->next(&payload);
      } catch (const Error& e) {
        throw Error(e.code(), fmt::format("predict: {}; the TFRecord file is damaged: check it with `trainer inspect "
                                          "{}`, or leave it out",
                                          e.what(), records_->path()));
      }
      if (more) {
        *item = decode_record(payload);
        return true;
      }
      records_.reset();
    }
    if (position_ == inputs_.size()) return false;
    const PredictInput& input = inputs_[position_++];
    if (input.kind == PredictInput::Kind::kImage) {
      *item = decode_image_file(input.path);
      return true;
    }
    data::TFRecordReaderOptions options;
    options.max_record_bytes = static_cast<uint64_t>(preprocessing_.data.max_record_mb) << 20;
    records_ = std::make_unique<data::TFRecordReader>(input.path, options);
  }
}

PredictItem PredictReader::decode_image_file(const std::string& path) {
  // The bytes go through the pipeline's map as the one feature of a tf.Example, so a file is
  // decoded, resized and normalised by exactly the code that serves the run's records.
  data::FeatureMap features;
  features[preprocessing_.image.image_key] = data::Feature::of_bytes({read_whole(path)});
  data::Element element;
  element.text = data::serialize_example(features);
  element.file = path;
  PredictItem item;
  item.path = path;
  try {
    item.image = image_map_(std::move(element)).tensors.at(0);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("predict: cannot decode image {}: {}; give a readable JPEG or PNG file", path,
                                      without_record_prefix(e.what(), path)));
  }
  return item;
}

PredictItem PredictReader::decode_record(std::string_view payload) {
  PredictItem item;
  item.path = records_->path();
  item.record = static_cast<int64_t>(records_->next_index()) - 1;
  data::Element element;
  element.text = std::string(payload);
  element.file = item.path;
  element.record = item.record;
  try {
    item.image = record_map_(std::move(element)).tensors.at(0);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("predict: {}; the run's {}.image settings (key, format, raw_shape) say how "
                                      "its records hold images: give records written the same way",
                                      e.what(), preprocessing_.section));
  }
  const std::string& label_key = preprocessing_.data.image.label_key;
  if (!label_key.empty()) {
    data::FastExampleParser parser({label_key});
    parser.parse(payload);  // the map parsed the same bytes: they are a tf.Example
    const data::FeatureView& label = parser.feature(0);
    if (label.present && label.type == data::FeatureType::kInt64 && label.ints.size() == 1) item.label = label.ints[0];
  }
  return item;
}

void PredictReader::check_fits_model(const PredictItem& item) const {
  const Shape& s = item.image.shape();
  const bool hwc = preprocessing_.image.augment.layout == data::ImageLayout::kNHWC;
  const int64_t c = hwc ? s[2] : s[0], h = hwc ? s[0] : s[1], w = hwc ? s[1] : s[2];
  const train::ModelConfig& m = preprocessing_.model;
  const bool channels_ok = m.in_channels <= 0 || c == m.in_channels;
  const bool size_ok = m.input_size <= 0 || (h == m.input_size && w == m.input_size);
  if (channels_ok && size_ok) return;
  const data::AugmentOptions& a = preprocessing_.image.augment;
  const std::string where = item.record < 0 ? item.path : fmt::format("{} record {}", item.path, item.record);
  std::string fix;
  if (!channels_ok) {
    fix = fmt::format("the run's {}.image.channels ({}) and model.in_channels ({}) disagree, so no input can fit",
                      preprocessing_.section, a.channels, m.in_channels);
  } else if (a.height == 0 || a.width == 0) {
    fix = fmt::format("this run's preprocessing keeps the decoded size ({}.image.height and width are 0), so give a "
                      "{} x {} image (resize it first)",
                      preprocessing_.section, m.input_size, m.input_size);
  } else {
    fix = fmt::format("the run resizes to {} x {} ({}.image.height and width), which model.input_size {} does not "
                      "take: the run's config disagrees with its model",
                      a.height, a.width, preprocessing_.section, m.input_size);
  }
  throw_error(ErrorCode::kInvalidArgument,
              "predict: {} is {} x {} x {} (channels x height x width) after the run's {} preprocessing ({}), but "
              "model '{}' takes {} x {} x {}; {}",
              where, c, h, w, preprocessing_.section, describe_size(a), m.name, m.in_channels, m.input_size,
              m.input_size, fix);
}

Tensor stack_images(const std::vector<PredictItem>& items, bool channels_last) {
  TANDEM_CHECK(!items.empty(), ErrorCode::kInternal, "stack_images: no items");
  const Shape& s = items.front().image.shape();
  Tensor batch = Tensor::empty(Shape{static_cast<int64_t>(items.size()), s[0], s[1], s[2]}, DType::kF32);
  float* dst = batch.data<float>();
  for (const PredictItem& item : items) {
    // check_fits_model gave every item the model's one size.
    TANDEM_CHECK(item.image.shape() == s && item.image.dtype() == DType::kF32, ErrorCode::kInternal,
                 "stack_images: {} is {}, the first item {}", item.path, item.image.describe(), s.str());
    std::memcpy(dst, item.image.data<float>(), item.image.nbytes());
    dst += item.image.numel();
  }
  if (!channels_last) return batch;
  return batch.view({batch.dim(0), s[2], s[0], s[1]}, MemoryFormat::kChannelsLast);
}

}  // namespace tandem::tools
