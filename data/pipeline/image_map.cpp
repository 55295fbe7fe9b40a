// make_image_map: record -> {image, label}, with decoding scaled to what the crop needs.
#include "data/pipeline/image_map.h"

#include <cmath>

#include "data/example_fast.h"
#include "engine/core/error.h"
#include "engine/core/suggest.h"

namespace tandem::data {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64's finaliser: a cheap, well-spread hash step.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

struct Decoded {
  Image image;
  ImageOrigin origin;  // where image sits in the (scaled) full image: a JPEG decodes only what the crop reads
  CropBox box;         // the region to resize, in the full (scaled) image's pixels
};

// Picks the crop on the full-size image first, then decodes at the smallest scale that keeps the
// crop at least the output size, and only the rows and columns the resize reads.
void decode_jpeg_for(std::string_view bytes, const ImageMapOptions& o, Generator& rng, Decoded* out) {
  const AugmentOptions& a = o.augment;
  ImageSize full = jpeg_size(bytes);
  CropBox box{0, 0, static_cast<float>(full.width), static_cast<float>(full.height)};
  if (a.random_resized_crop && a.crop_padding == 0 && a.height > 0) {
    box = random_resized_crop_box(full.width, full.height, a.crop_range, rng);
  }
  int need_w = 0, need_h = 0;
  if (a.height > 0 && a.crop_padding == 0) {
    // The scaled crop must stay at least the output size, so resizing only ever shrinks or keeps.
    need_w = static_cast<int>(std::ceil(static_cast<float>(a.width) * full.width / box.width));
    need_h = static_cast<int>(std::ceil(static_cast<float>(a.height) * full.height / box.height));
  }
  JpegScale scale = choose_jpeg_scale(full, need_w, need_h);
  ImageSize size = scaled_size(full, scale);
  out->box = box.scaled(static_cast<float>(size.width) / static_cast<float>(full.width));
  PixelSpan want{0, size.width, 0, size.height};  // the whole image unless a resize reads less
  if (a.width > 0 && a.height > 0 && a.crop_padding == 0) {
    want = resize_source_span(size.width, size.height, out->box, a.width, a.height);
  }
  decode_jpeg_region(bytes, a.channels, scale, want, &out->image, &out->origin, o.accept_truncated_jpeg);
}

void decode_raw(const FeatureView& f, const ImageMapOptions& o, Image* out) {
  TANDEM_CHECK(o.raw_shape.size() == 3, ErrorCode::kInvalidArgument,
               "image format raw needs raw_shape (H, W, C), got {} values", o.raw_shape.size());
  for (int64_t side : o.raw_shape) {
    // Checked before any product: a negative side would wrap the byte count into a match.
    TANDEM_CHECK(side >= 1 && side <= 65535, ErrorCode::kInvalidArgument,
                 "image format raw: raw_shape [{}, {}, {}] needs sides from 1 to 65535", o.raw_shape[0],
                 o.raw_shape[1], o.raw_shape[2]);
  }
  out->height = static_cast<int>(o.raw_shape[0]);
  out->width = static_cast<int>(o.raw_shape[1]);
  out->channels = static_cast<int>(o.raw_shape[2]);
  size_t expected = static_cast<size_t>(out->height) * out->width * out->channels;
  std::string_view bytes = f.bytes.empty() ? std::string_view{} : f.bytes[0];
  TANDEM_CHECK(bytes.size() == expected, ErrorCode::kDataLoss, "raw image of {} bytes, raw_shape {}x{}x{} needs {}",
               bytes.size(), out->height, out->width, out->channels, expected);
  out->pixels.assign(bytes.begin(), bytes.end());
}

void decode(const FeatureView& f, const ImageMapOptions& o, Generator& rng, Decoded* out) {
  TANDEM_CHECK(f.type == FeatureType::kBytes && f.bytes.size() == 1, ErrorCode::kInvalidArgument,
               "feature '{}' is {} with {} values; expected one encoded image (bytes)", o.image_key,
               feature_type_name(f.type), f.size());
  ImageFormat format = o.format == ImageFormat::kAuto ? sniff_image_format(f.bytes[0]) : o.format;
  if (format == ImageFormat::kJpeg) {
    decode_jpeg_for(f.bytes[0], o, rng, out);
    return;
  }
  if (format == ImageFormat::kPng) {
    decode_png(f.bytes[0], o.augment.channels, &out->image);
  } else {
    decode_raw(f, o, &out->image);
  }
  const Image& im = out->image;
  out->origin = {0, 0, im.width, im.height};
  out->box = {0, 0, static_cast<float>(im.width), static_cast<float>(im.height)};
  if (o.augment.random_resized_crop && o.augment.crop_padding == 0 && o.augment.height > 0) {
    out->box = random_resized_crop_box(im.width, im.height, o.augment.crop_range, rng);
  }
}

// Crop, resize and flip into (H, W, C) bytes, then lay out and normalise into the image tensor;
// a uint8 NHWC output is written straight into the tensor.
Tensor augment(const Decoded& d, const AugmentOptions& a, Generator& rng) {
  const Image& im = d.image;
  const int c = im.channels;
  bool flip = a.horizontal_flip && (rng.next_u32() & 1u) != 0;
  int dx = 0, dy = 0;
  if (a.crop_padding > 0) {
    dx = static_cast<int>(rng.below(static_cast<uint64_t>(2 * a.crop_padding + 1)));
    dy = static_cast<int>(rng.below(static_cast<uint64_t>(2 * a.crop_padding + 1)));
  }
  const bool resize = a.crop_padding == 0;
  const int w = resize && a.width > 0 ? a.width : im.width;
  const int h = resize && a.height > 0 ? a.height : im.height;
  const bool chw = a.layout == ImageLayout::kNCHW;
  const bool in_place = !a.normalize && !chw;
  Tensor t = Tensor::empty(chw ? Shape{c, h, w} : Shape{h, w, c}, a.normalize ? DType::kF32 : DType::kU8);
  thread_local std::vector<uint8_t> scratch;
  if (!in_place) scratch.resize(static_cast<size_t>(w) * h * c);
  uint8_t* hwc = in_place ? t.data<uint8_t>() : scratch.data();
  if (resize) {
    resize_bilinear(im, d.origin, d.box, flip, w, h, hwc);
  } else {
    crop_with_padding(im, a.crop_padding, dx, dy, flip, hwc);
  }
  if (a.normalize) {
    normalize(hwc, w, h, c, a.mean, a.std, chw, t.data<float>());
  } else if (chw) {
    hwc_to_chw(hwc, w, h, c, t.data<uint8_t>());
  }
  return t;
}

Element map_one(const ImageMapOptions& options, const std::vector<std::string>& keys, Element in) {
  FastExampleParser parser(keys);
  parser.parse(in.text);
  Generator rng = element_generator(options.seed, options.replica, in);
  const FeatureView& image = parser.feature(0);
  TANDEM_CHECK(image.present, ErrorCode::kInvalidArgument, "no feature '{}'", options.image_key);
  // The pixel buffer is reused (no fresh pages to touch per image); each loader thread keeps
  // one as large as its largest image.
  thread_local Decoded decoded;
  decode(image, options, rng, &decoded);
  Element out;
  out.file = std::move(in.file);
  out.record = in.record;
  out.epoch = in.epoch;
  out.tensors.push_back(augment(decoded, options.augment, rng));
  if (keys.size() > 1) {
    const FeatureView& label = parser.feature(1);
    TANDEM_CHECK(label.present && label.type == FeatureType::kInt64 && label.ints.size() == 1,
                 ErrorCode::kInvalidArgument, "feature '{}' must be one int64", options.label_key);
    const int64_t value = label.ints[0];
    TANDEM_CHECK(options.num_classes <= 0 || (value >= 0 && value < options.num_classes),
                 ErrorCode::kInvalidArgument,
                 "label {} (feature '{}') is outside [0, {}): the model has model.num_classes {} classes; fix the "
                 "record or set model.num_classes",
                 value, options.label_key, options.num_classes, options.num_classes);
    out.tensors.push_back(scalar_i64(value));
  }
  return out;
}

}  // namespace

std::string_view image_layout_name(ImageLayout layout) { return layout == ImageLayout::kNHWC ? "nhwc" : "nchw"; }

ImageLayout parse_image_layout(std::string_view name) {
  if (name == "nhwc") return ImageLayout::kNHWC;
  if (name == "nchw") return ImageLayout::kNCHW;
  throw_error(ErrorCode::kInvalidArgument, "unknown layout '{}': expected nhwc or nchw{}", name,
              did_you_mean(name, {"nhwc", "nchw"}));
}

Generator element_generator(uint64_t seed, int replica, const Element& element) {
  uint64_t h = mix(0, static_cast<uint64_t>(replica));
  // FNV-1a over the file's name, not its path: the same files reached by an absolute or a relative
  // path, through a linked folder, or copied to a local disk give the same augmentation.
  const std::string_view name = std::string_view(element.file).substr(element.file.rfind('/') + 1);
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ULL;
  h = mix(h, static_cast<uint64_t>(element.record));
  h = mix(h, static_cast<uint64_t>(element.epoch));
  return Generator(seed, h);
}

MapFn make_image_map(ImageMapOptions options) {
  const AugmentOptions& a = options.augment;
  for (size_t i = 0; a.normalize && i < a.mean.size(); ++i) {
    // A NaN mean trains NaN first-layer weights while ReLU keeps the loss finite: refused here.
    TANDEM_CHECK(std::isfinite(a.mean[i]) && std::isfinite(a.std[i]) && a.std[i] > 0.0f, ErrorCode::kInvalidArgument,
                 "image normalisation: mean[{}] = {} and std[{}] = {}; both must be finite numbers and std positive",
                 i, a.mean[i], i, a.std[i]);
  }
  std::vector<std::string> keys{options.image_key};
  if (!options.label_key.empty()) keys.push_back(options.label_key);
  return [options, keys](Element in) {
    std::string file = in.file;
    int64_t record = in.record;
    try {
      return map_one(options, keys, std::move(in));
    } catch (const Error& e) {
      // Name the record: the decoder only knows bytes.
      throw Error(e.code(), fmt::format("{} record {}: {}", file, record, e.what()));
    }
  };
}

}  // namespace tandem::data
