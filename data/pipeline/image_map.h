// The map function that turns a tf.Example record into training tensors on a loader thread:
// parse the image and label features, decode (JPEG, PNG or raw), augment, lay out, and hand
// back {image, label}. Random choices are seeded per record, so any thread order gives the same.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/pipeline/dataset.h"
#include "data/pipeline/image_augment.h"

namespace tandem::data {

enum class ImageLayout { kNHWC, kNCHW };
std::string_view image_layout_name(ImageLayout layout);  // "nhwc", "nchw"
ImageLayout parse_image_layout(std::string_view name);

struct AugmentOptions {
  int height = 224;  // output size; 0 keeps the decoded size (raw and small images)
  int width = 224;
  int channels = 3;
  bool random_resized_crop = true;  // else the whole image is resized to height x width
  RandomResizedCropRange crop_range;
  int crop_padding = 0;             // > 0: random crop with this padding instead (CIFAR style)
  bool horizontal_flip = true;      // with probability 1/2
  bool normalize = false;           // false: the batch stays uint8 (a quarter of the bytes to copy)
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // on the [0, 1] scale, as torchvision
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
  ImageLayout layout = ImageLayout::kNHWC;
};

struct ImageMapOptions {
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";  // "" for no label
  ImageFormat format = ImageFormat::kAuto;
  std::vector<int64_t> raw_shape;  // (H, W, C) of a raw uint8 or float image feature
  int64_t num_classes = 0;         // > 0: a label outside [0, num_classes) is an error naming the record
  // A JPEG whose data ends before the rows the decode needs is a DataLoss naming the record, as
  // TensorFlow's decode_jpeg refuses it by default; true decodes it with its missing rows grey
  // (TensorFlow's try_recover_truncated).
  bool accept_truncated_jpeg = false;
  AugmentOptions augment;
  uint64_t seed = 0;
  int replica = 0;
};

// Element{text: serialized tf.Example} -> Element{tensors: {image, label}}; the image is
// u8 (or f32 when normalising) (H, W, C) for NHWC or (C, H, W) for NCHW; the label an i64 scalar.
MapFn make_image_map(ImageMapOptions options);

// The per-record generator: a pure function of (seed, replica, epoch, the file's name, record);
// the folder the file is reached through plays no part.
Generator element_generator(uint64_t seed, int replica, const Element& element);

}  // namespace tandem::data
