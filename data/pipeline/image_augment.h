// Augmentations on packed (H, W, C) 8-bit images, run on loader threads: Inception-style random
// resized crop, random crop with padding, horizontal flip and bilinear resize (fused into one
// pass), and normalisation into float NCHW or NHWC.
#pragma once

#include <array>
#include <cstdint>

#include "data/pipeline/image_decode.h"
#include "engine/core/random.h"

namespace tandem::data {

// A region of an image in pixels; fractional so a box found at full size maps onto a scaled decode.
struct CropBox {
  float x = 0, y = 0, width = 0, height = 0;
  CropBox scaled(float factor) const { return {x * factor, y * factor, width * factor, height * factor}; }
};

struct RandomResizedCropRange {
  float scale_min = 0.08f, scale_max = 1.0f;        // share of the image area
  float ratio_min = 3.0f / 4, ratio_max = 4.0f / 3;  // width / height
};

// torchvision's RandomResizedCrop box: ten tries at a random area and log-uniform aspect
// ratio, then the central crop with the aspect ratio clamped into range.
CropBox random_resized_crop_box(int width, int height, const RandomResizedCropRange& range, Generator& rng);

// Bilinear resize of box of src into dst (dst_w x dst_h, same channels, packed), mirrored
// left-right when flip: the crop, the resize and the flip cost one pass.
void resize_bilinear(const Image& src, const CropBox& box, bool flip, int dst_w, int dst_h, uint8_t* dst);
// The same when src holds only a region of the full image (box in the full image's pixels): the
// result is the full image's, bit for bit, when the region covers resize_source_span.
void resize_bilinear(const Image& src, const ImageOrigin& origin, const CropBox& box, bool flip, int dst_w, int dst_h,
                     uint8_t* dst);
// The pixels of a full_width x full_height image that resizing box to dst_w x dst_h reads.
PixelSpan resize_source_span(int full_width, int full_height, const CropBox& box, int dst_w, int dst_h);

// Pads by `padding` zero pixels on every side and crops the original size at (dx, dy) in the
// padded image, dx, dy in [0, 2 * padding]; mirrored when flip.
void crop_with_padding(const Image& src, int padding, int dx, int dy, bool flip, uint8_t* dst);

// (v / 255 - mean[c]) / std[c] into float, as (C, H, W) when chw else (H, W, C).
void normalize(const uint8_t* src, int width, int height, int channels, const std::array<float, 3>& mean,
               const std::array<float, 3>& std, bool chw, float* dst);

// (H, W, C) bytes to (C, H, W).
void hwc_to_chw(const uint8_t* src, int width, int height, int channels, uint8_t* dst);

}  // namespace tandem::data
