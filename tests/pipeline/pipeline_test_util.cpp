// Test fixtures for the pipeline suites (see pipeline_test_util.h).
#include "tests/pipeline/pipeline_test_util.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "data/tfrecord_writer.h"
#include "engine/core/random.h"

namespace tandem::data::testing {

ScratchDir::ScratchDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-pipe-XXXXXX").string();
  char* made = ::mkdtemp(tmpl.data());
  if (made == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = made;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Image synthetic_image(int width, int height, int channels, uint64_t seed) {
  Generator rng(seed);
  Image im;
  im.width = width;
  im.height = height;
  im.channels = channels;
  im.pixels.resize(static_cast<size_t>(width) * height * channels);
  float phase = rng.uniform(0, 6.28f);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        float v = 128 + 60 * std::sin(phase + 0.02f * x * (c + 1)) + 40 * std::cos(0.03f * y) + rng.uniform(-20, 20);
        im.pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return im;
}

namespace {

void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void put_field(std::string* out, int field, const std::string& bytes) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);  // wire type 2: length-delimited
  put_varint(out, bytes.size());
  out->append(bytes);
}

std::string map_entry(const std::string& key, const std::string& feature) {
  std::string entry;
  put_field(&entry, 1, key);
  put_field(&entry, 2, feature);
  return entry;
}

}  // namespace

// Written straight in the wire format (tf.train.Example > Features > map<string, Feature>), so
// the fixtures do not depend on the protobuf runtime, which the TSan build cannot use here.
std::string int64_example(const std::string& key, const std::vector<int64_t>& values) {
  std::string packed, int64_list, feature, features, example;
  for (int64_t v : values) put_varint(&packed, static_cast<uint64_t>(v));
  put_field(&int64_list, 1, packed);  // Int64List.value, packed
  put_field(&feature, 3, int64_list);  // Feature.int64_list
  put_field(&features, 1, map_entry(key, feature));
  put_field(&example, 1, features);
  return example;
}

std::string image_example(const std::string& encoded, int64_t label) {
  std::string bytes_list, int64_list, packed, image_feature, label_feature, features, example;
  put_field(&bytes_list, 1, encoded);
  put_field(&image_feature, 1, bytes_list);  // Feature.bytes_list
  put_varint(&packed, static_cast<uint64_t>(label));
  put_field(&int64_list, 1, packed);  // Int64List.value, packed
  put_field(&label_feature, 3, int64_list);  // Feature.int64_list
  put_field(&features, 1, map_entry("image/class/label", label_feature));
  put_field(&features, 1, map_entry("image/encoded", image_feature));
  put_field(&example, 1, features);
  return example;
}

void write_tfrecord(const std::string& path, const std::vector<std::string>& records) {
  TFRecordWriter writer(path);
  for (const std::string& r : records) writer.write(r);
  writer.close();
}

std::vector<std::string> write_labelled_files(const std::string& prefix, const std::vector<int>& counts) {
  std::vector<std::string> paths;
  int64_t id = 0;
  for (size_t f = 0; f < counts.size(); ++f) {
    std::vector<std::string> records;
    for (int i = 0; i < counts[f]; ++i, ++id) {
      std::string raw(4, static_cast<char>(id & 0xff));
      records.push_back(image_example(raw, id));
    }
    paths.push_back(prefix + "-" + std::to_string(f) + ".tfrecord");
    write_tfrecord(paths.back(), records);
  }
  return paths;
}

std::vector<int64_t> records_of(const Dataset& ds, int64_t epoch) {
  std::vector<int64_t> out;
  DatasetIterator it = ds.make_iterator(epoch);
  Element e;
  while (it.next(&e)) out.push_back(e.record);
  return out;
}

std::vector<int64_t> labels_of(const Dataset& ds, int64_t epoch) {
  std::vector<int64_t> out;
  DatasetIterator it = ds.make_iterator(epoch);
  Element e;
  while (it.next(&e)) {
    const Tensor& labels = e.tensors.back();
    for (int64_t i = 0; i < labels.numel(); ++i) out.push_back(labels.data<int64_t>()[i]);
  }
  return out;
}

int thread_count() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n;
}

bool finishes_within(std::chrono::milliseconds limit, const std::function<void()>& fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> result = done->get_future();
  std::thread worker([fn, done] {
    try {
      fn();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  if (result.wait_for(limit) != std::future_status::ready) {
    worker.detach();  // the test fails; a hung thread must not hang the suite as well
    return false;
  }
  worker.join();
  result.get();  // rethrows an assertion's exception, if any
  return true;
}

}  // namespace tandem::data::testing
