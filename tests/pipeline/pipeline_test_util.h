// Fixtures the pipeline tests make at run time: a scratch folder, TFRecord files of
// tf.Examples with raw or JPEG images, synthetic photos, and helpers to drain a dataset.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/pipeline/dataset.h"
#include "data/pipeline/image_decode.h"

namespace tandem::data::testing {

// A fresh folder under the system temp dir, removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// A photo-like test image: gradients plus noise, so JPEG sizes and decode costs are realistic.
Image synthetic_image(int width, int height, int channels, uint64_t seed);

// A serialized tf.Example with "image/encoded" (bytes) and "image/class/label" (int64).
std::string image_example(const std::string& encoded, int64_t label);
// A serialized tf.Example with one int64 feature (packed). Written by hand, as image_example is,
// so the threaded suites run under ThreadSanitizer without protobuf (whose Map crashed there).
std::string int64_example(const std::string& key, const std::vector<int64_t>& values);

// Writes records to a TFRecord file.
void write_tfrecord(const std::string& path, const std::vector<std::string>& records);

// Writes `counts[i]` records to file i ("<prefix>-<i>.tfrecord"), each a tf.Example whose label
// is a global id (0, 1, ... across all files) and whose image is a raw 2x2x1 image; returns paths.
std::vector<std::string> write_labelled_files(const std::string& prefix, const std::vector<int>& counts);

// Pulls every element; record fields (or labels, when take_labels) in order.
std::vector<int64_t> records_of(const Dataset& ds, int64_t epoch = 0);
std::vector<int64_t> labels_of(const Dataset& ds, int64_t epoch = 0);

// Threads of this process now (entries of /proc/self/task).
int thread_count();

// Runs fn on another thread and fails the test (returns false) if it takes longer than limit.
bool finishes_within(std::chrono::milliseconds limit, const std::function<void()>& fn);

}  // namespace tandem::data::testing
