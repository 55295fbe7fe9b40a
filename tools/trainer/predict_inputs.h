// The inputs of `trainer predict`: image files, folders of them and TFRecord files, expanded and
// told apart by their bytes, then decoded and preprocessed by the data pipeline's own image map
// with a run's evaluation settings (no augmentation), so the model sees what `trainer eval` feeds it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/pipeline/image_map.h"
#include "data/pipeline/pipeline_config.h"
#include "data/tfrecord_reader.h"
#include "engine/core/tensor.h"
#include "engine/train/config.h"

namespace tandem::tools {

// One file to read: an encoded image (JPEG or PNG) or a TFRecord file of tf.Examples.
struct PredictInput {
  enum class Kind { kImage, kTFRecord };
  std::string path;
  Kind kind = Kind::kImage;
};

// Each path as given: a file is classified by its first bytes (a JPEG or PNG signature, else a
// valid TFRecord header, plain or compressed); a folder stands for its .jpg, .jpeg and .png files
// (not its sub-folders), sorted by name. A missing path, an empty folder or a file that is
// neither is an error naming it and what to give instead.
std::vector<PredictInput> expand_predict_inputs(const std::vector<std::string>& paths);

// How inputs become model inputs: a data section's image settings with every random choice
// (random resized crop, padded crop, flip) turned off, laid out as the model takes them.
struct Preprocessing {
  std::string section;       // "eval_data", or "data" when the run had no evaluation data
  data::PipelineConfig data;  // that section (its reading settings serve TFRecord inputs)
  data::ImageMapOptions image;
  train::ModelConfig model;
};
// InvalidArgument when the section's images are not normalised (a training run refuses those too).
Preprocessing make_preprocessing(const data::PipelineConfig& section, const std::string& name,
                                 const train::ModelConfig& model);
// One line for the log: "eval_data: decoded size, 1 channel(s), normalised, nhwc".
std::string describe_preprocessing(const Preprocessing& p);

// One preprocessed input: an image file, or a record of a TFRecord file.
struct PredictItem {
  std::string path;
  int64_t record = -1;           // the record's index in a TFRecord file; -1 for an image file
  std::optional<int64_t> label;  // a record's label feature, when it has one
  Tensor image;                  // f32 (C, H, W), or (H, W, C) for a channels_last model
};

// Reads the inputs in order, a batch at a time, holding at most one TFRecord file open.
class PredictReader {
 public:
  PredictReader(std::vector<PredictInput> inputs, Preprocessing preprocessing);
  ~PredictReader();
  PredictReader(const PredictReader&) = delete;
  PredictReader& operator=(const PredictReader&) = delete;

  // Up to `count` items, fewer at the end, none when every input is read. A record or image that
  // cannot be decoded, or whose preprocessed size the model does not take, throws naming it.
  std::vector<PredictItem> next(size_t count);

 private:
  bool next_one(PredictItem* item);
  PredictItem decode_image_file(const std::string& path);
  PredictItem decode_record(std::string_view payload);
  void check_fits_model(const PredictItem& item) const;

  std::vector<PredictInput> inputs_;
  Preprocessing preprocessing_;
  data::MapFn image_map_;   // image files: the format is sniffed, whatever the section says
  data::MapFn record_map_;  // TFRecords: the section's format and keys
  size_t position_ = 0;     // the next input to open
  std::unique_ptr<data::TFRecordReader> records_;  // the TFRecord input being read
};

// The N items' images as one (N, C, H, W) batch in the model's memory format (a channels_last
// model's (N, H, W, C) rows are viewed as NCHW without a copy, as the training loop does).
Tensor stack_images(const std::vector<PredictItem>& items, bool channels_last);

}  // namespace tandem::tools
