// The raw-data sources `trainer convert` turns into tf.Example records: IDX files (MNIST,
// Fashion-MNIST), CSV with a header, and an image folder with one sub-folder per class (text
// windows are in text.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/example.h"

namespace tandem::data {

class ConvertSource {
 public:
  virtual ~ConvertSource() = default;
  virtual size_t size() const = 0;
  // The serialized tf.Example of item i; called from several threads at once.
  virtual std::string record(size_t i) const = 0;
  virtual int64_t label(size_t i) const = 0;  // the class index of item i
  virtual bool labelled() const { return true; }  // false: no classes to count (text windows)
  virtual std::string class_name(int64_t label) const { return std::to_string(label); }
  virtual uint64_t estimated_bytes() const = 0;  // of all records, to size the shards
};

// IDX image and label files (gzipped or not), as Debian's dataset-fashion-mnist installs them.
// Records: image/encoded (the raw HxW uint8 pixels), image/format "raw", image/height,
// image/width, image/channels (1) and image/class/label.
std::unique_ptr<ConvertSource> open_idx_source(const std::string& images_path, const std::string& labels_path);

struct CsvOptions {
  std::string label_column;                      // required: the class of each row
  std::map<std::string, FeatureType> types;      // stated column types; the rest are inferred
  char delimiter = ',';
};
// CSV with a header line; RFC 4180 quoting. Each column becomes a feature of its own name; an
// empty cell is a Feature with no kind (as TFX's CsvExampleGen writes it).
std::unique_ptr<ConvertSource> open_csv_source(const std::string& path, const CsvOptions& options);

// root/<class>/<image>.{jpg,jpeg,png}: classes are the sub-folders in sorted order (label 0, 1, ...).
// The encoded bytes are kept as they are, with the keys of TensorFlow's image pipelines.
std::unique_ptr<ConvertSource> open_image_folder_source(const std::string& root);

}  // namespace tandem::data
