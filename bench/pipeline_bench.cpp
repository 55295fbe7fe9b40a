// The input pipeline against the machine: a JPEG TFRecord pipeline (read, decode, random
// resized crop to 224, flip, batch) in images/s beside plain libjpeg-turbo decoding of the same
// images on the same number of threads, in the same run. Goal: pipeline / plain >= 0.9.
//   pipeline_bench [--threads T] [--images N] [--seconds S] [--batch B]
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "data/example.h"
#include "data/pipeline/dataset.h"
#include "data/pipeline/image_map.h"
#include "data/tfrecord_writer.h"
#include "engine/core/context.h"
#include "engine/core/random.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 5;
using namespace tandem;
using namespace tandem::data;

struct Args {
  int threads = available_cores();
  int images = 256;
  double seconds = 4;
  int batch = 64;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--threads") a.threads = v;
    if (k == "--images") a.images = v;
    if (k == "--seconds") a.seconds = std::atof(argv[i + 1]);
    if (k == "--batch") a.batch = v;
  }
  return a;
}

// A 500x375 photo-like image: smooth gradients, a few edges and sensor-like noise.
Image photo(int w, int h, uint64_t seed) {
  Generator rng(seed);
  Image im;
  im.width = w;
  im.height = h;
  im.channels = 3;
  im.pixels.resize(static_cast<size_t>(w) * h * 3);
  float fx = rng.uniform(0.005f, 0.03f), fy = rng.uniform(0.005f, 0.03f), edge = rng.uniform(0.2f, 0.8f) * w;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        float v = 110 + 70 * std::sin(fx * x * (c + 1) + fy * y) + (x > edge ? 30 : -30) + rng.uniform(-12, 12);
        im.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return im;
}

// Plain libjpeg-turbo: each thread decodes its share of the images at full size into its own buffer.
double plain_decode_rate(const std::vector<std::string>& jpegs, int threads, double seconds, double warmup) {
  std::atomic<int64_t> decoded{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      tjhandle tj = tjInitDecompress();
      std::vector<unsigned char> buffer(500 * 375 * 3);
      for (size_t i = static_cast<size_t>(t); !stop.load(std::memory_order_relaxed); i = (i + threads) % jpegs.size()) {
        const std::string& j = jpegs[i];
        int w = 0, h = 0, sub = 0, cs = 0;
        tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(j.data()), j.size(), &w, &h, &sub, &cs);
        buffer.resize(static_cast<size_t>(w) * h * 3);
        tjDecompress2(tj, reinterpret_cast<const unsigned char*>(j.data()), j.size(), buffer.data(), w, 0, h,
                      TJPF_RGB, 0);
        decoded.fetch_add(1, std::memory_order_relaxed);
      }
      tjDestroy(tj);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  int64_t start_count = decoded.load();
  auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  int64_t n = decoded.load() - start_count;
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  for (auto& w : workers) w.join();
  return static_cast<double>(n) / elapsed;
}

double pipeline_rate(const std::vector<std::string>& files, const Args& a, double seconds, double warmup,
                     std::vector<StageSnapshot>* stages) {
  ImageMapOptions options;  // 224x224 random resized crop + flip, uint8 NHWC
  options.seed = 1;
  Dataset ds = Dataset::from_files(files)
                   .repeat()
                   .interleave([](const Element& f) { return Dataset::tfrecord(f.text); }, 4, 1, 2)
                   .map(make_image_map(options), a.threads, true, "map(decode+augment)")
                   .batch(a.batch, true)
                   .prefetch(2);
  DatasetIterator it = ds.make_iterator();
  Element batch;
  auto warm_until = Clock::now() + std::chrono::duration<double>(warmup);
  while (Clock::now() < warm_until) it.next(&batch);
  int64_t images = 0;
  auto start = Clock::now();
  auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end && it.next(&batch)) images += batch.tensors[0].dim(0);
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  *stages = it.stats()->snapshot();
  return static_cast<double>(images) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  auto dir = std::filesystem::temp_directory_path() / ("tandem-pipeline-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> jpegs, files;
  const int kFiles = 8;
  for (int f = 0; f < kFiles; ++f) {
    files.push_back((dir / ("train-" + std::to_string(f) + ".tfrecord")).string());
    TFRecordWriter writer(files.back());
    for (int i = f; i < a.images; i += kFiles) {
      jpegs.push_back(encode_jpeg(photo(500, 375, static_cast<uint64_t>(i)), 90));
      FeatureMap features;
      features["image/encoded"] = Feature::of_bytes({jpegs.back()});
      features["image/class/label"] = Feature::of_ints({i % 1000});
      writer.write(serialize_example(features));
    }
    writer.close();
  }
  size_t bytes = 0;
  for (const auto& j : jpegs) bytes += j.size();
  std::printf("%d JPEGs 500x375 q90 (%.0f KiB average) in %d TFRecord files; %d threads, batch %d\n", a.images,
              static_cast<double>(bytes) / jpegs.size() / 1024, kFiles, a.threads, a.batch);
  std::printf("%.1f s per side in %d alternating rounds, best round of each kept\n", a.seconds, kRounds);
  // The two alternate in short rounds and each keeps its best round, so load from other
  // processes drifting over the run does not favour one side.
  double plain = 0, pipe = 0;
  std::vector<StageSnapshot> stages;
  for (int round = 0; round < kRounds; ++round) {
    plain = std::max(plain, plain_decode_rate(jpegs, a.threads, a.seconds / kRounds, 0.2));
    pipe = std::max(pipe, pipeline_rate(files, a, a.seconds / kRounds, 0.3, &stages));
  }
  std::printf("plain libjpeg-turbo decode (full size):            %8.1f images/s\n", plain);
  std::printf("pipeline (read, decode, crop 224, flip, batch):    %8.1f images/s\n", pipe);
  std::printf("ratio pipeline / plain decode:                     %8.2f  (goal >= 0.90)\n", pipe / plain);
  for (const StageSnapshot& s : stages) {
    std::printf("  stage %-22s busy %7.2f s over %d thread(s), %lld elements\n", s.name.c_str(), s.busy_seconds,
                s.parallelism, static_cast<long long>(s.elements));
  }
  std::filesystem::remove_all(dir);
  return 0;
}
