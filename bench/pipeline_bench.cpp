// The input pipeline against the machine: a JPEG TFRecord pipeline (read, decode, random
// resized crop to 224, flip, batch) in images/s beside plain libjpeg-turbo decoding of the same
// images on the same number of threads, in the same run. Goal: pipeline / plain >= 0.9.
// Each stage's busy share and queue waits say where the pipeline's time goes.
//   pipeline_bench [--threads T] [--images N] [--seconds S] [--rounds R] [--batch B]
//                  [--side both|plain|pipeline]
//   pipeline_bench --write-folder DIR [--images N]   (the same JPEGs as an image folder, then exit)
//   pipeline_bench --checksum 1   (a hash of the pipeline's first 16 batches: changes to the pipeline
//                                  must leave it as it was)
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "data/example.h"
#include "data/pipeline/dataset.h"
#include "data/pipeline/image_map.h"
#include "data/tfrecord_writer.h"
#include "engine/core/context.h"
#include "engine/core/error.h"
#include "engine/core/random.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace tandem;
using namespace tandem::data;

struct Args {
  int threads = available_cores();
  int images = 256;
  double seconds = 4;
  int batch = 64;
  std::string side = "both";
  std::string write_folder;
  bool checksum = false;
  int rounds = 5;
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
    if (k == "--side") a.side = argv[i + 1];
    if (k == "--write-folder") a.write_folder = argv[i + 1];
    if (k == "--checksum") a.checksum = v != 0;
    if (k == "--rounds") a.rounds = std::max(1, v);
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

// CPU time of the whole process (all threads), to tell work from waiting: a side that uses fewer
// cores than it has threads while its consumer waits is held up by something serial.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A side's rate and the cores it kept busy over its measured window.
struct Rate {
  double images_per_second = 0;
  double cores = 0;
};

// Plain libjpeg-turbo: each thread decodes its share of the images at full size into its own buffer.
Rate plain_decode_rate(const std::vector<std::string>& jpegs, int threads, double seconds, double warmup) {
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
  double cpu = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  int64_t n = decoded.load() - start_count;
  cpu = process_cpu_seconds() - cpu;
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  for (auto& w : workers) w.join();
  return {static_cast<double>(n) / elapsed, cpu / elapsed};
}

// One measured window of the pipeline: images, wall time, the time the consumer (this thread)
// waited for a batch, and each stage's counters over the window only (warm-up left out).
struct PipelineRound {
  int64_t images = 0;
  double seconds = 0;
  double consumer_wait = 0;
  double cpu_seconds = 0;  // of the whole process over the window
  std::vector<StageSnapshot> stages;
};

// Adds sign * b's counters to the stage of the same name in *a (a stage new in b is appended).
void accumulate(std::vector<StageSnapshot>* a, const std::vector<StageSnapshot>& b, double sign) {
  for (const StageSnapshot& s : b) {
    auto it = std::find_if(a->begin(), a->end(), [&](const StageSnapshot& x) { return x.name == s.name; });
    if (it == a->end()) {
      it = a->insert(a->end(), StageSnapshot{.name = s.name, .parallelism = s.parallelism});
    }
    it->busy_seconds += sign * s.busy_seconds;
    it->elements += static_cast<int64_t>(sign) * s.elements;
    it->consumer_wait_seconds += sign * s.consumer_wait_seconds;
    it->producer_wait_seconds += sign * s.producer_wait_seconds;
    it->input_wait_seconds += sign * s.input_wait_seconds;
  }
}

Dataset bench_pipeline(const std::vector<std::string>& files, const Args& a) {
  ImageMapOptions options;  // 224x224 random resized crop + flip, uint8 NHWC
  options.seed = 1;
  return Dataset::from_files(files)
      .repeat()
      .interleave([](const Element& f) { return Dataset::tfrecord(f.text); }, 4, 1, 2)
      .map(make_image_map(options), a.threads, true, "map(decode+augment)")
      .batch(a.batch, true)
      .prefetch(2);
}

PipelineRound pipeline_round(const std::vector<std::string>& files, const Args& a, double seconds, double warmup) {
  DatasetIterator it = bench_pipeline(files, a).make_iterator();
  Element batch;
  auto warm_until = Clock::now() + std::chrono::duration<double>(warmup);
  while (Clock::now() < warm_until) it.next(&batch);
  PipelineRound round;
  accumulate(&round.stages, it.stats()->snapshot(), -1);
  auto start = Clock::now();
  round.cpu_seconds = -process_cpu_seconds();
  auto end = start + std::chrono::duration<double>(seconds);
  for (auto before = start; before < end; before = Clock::now()) {
    if (!it.next(&batch)) break;
    round.consumer_wait += std::chrono::duration<double>(Clock::now() - before).count();
    round.images += batch.tensors[0].dim(0);
  }
  round.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  round.cpu_seconds += process_cpu_seconds();
  accumulate(&round.stages, it.stats()->snapshot(), +1);
  return round;
}

// FNV-1a over the bytes of the first 16 batches (images and labels): what the pipeline hands
// out for seed 1 must not change with how fast it runs.
void print_checksum(const std::vector<std::string>& files, const Args& a) {
  DatasetIterator it = bench_pipeline(files, a).make_iterator();
  Element batch;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int b = 0; b < 16 && it.next(&batch); ++b) {
    for (const Tensor& t : batch.tensors) {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
    }
  }
  std::printf("checksum of the first 16 batches: %016llx\n", static_cast<unsigned long long>(h));
}

std::vector<std::string> write_images(const Args& a, const std::filesystem::path& dir, std::vector<std::string>* jpegs) {
  std::vector<std::string> files;
  const int kFiles = 8;
  for (int f = 0; f < kFiles; ++f) {
    files.push_back((dir / ("train-" + std::to_string(f) + ".tfrecord")).string());
    TFRecordWriter writer(files.back());
    for (int i = f; i < a.images; i += kFiles) {
      jpegs->push_back(encode_jpeg(photo(500, 375, static_cast<uint64_t>(i)), 90));
      FeatureMap features;
      features["image/encoded"] = Feature::of_bytes({jpegs->back()});
      features["image/class/label"] = Feature::of_ints({i % 1000});
      writer.write(serialize_example(features));
    }
    writer.close();
  }
  return files;
}

// The same images as an image folder (DIR/class-K/image-N.jpg, eight classes) for
// bench/run_input_bench.sh: `trainer convert --source images` and PyTorch's ImageFolder read it.
void write_folder(const Args& a) {
  for (int i = 0; i < a.images; ++i) {
    auto dir = std::filesystem::path(a.write_folder) / ("class-" + std::to_string(i % 8));
    std::filesystem::create_directories(dir);
    std::string jpeg = encode_jpeg(photo(500, 375, static_cast<uint64_t>(i)), 90);
    std::FILE* f = std::fopen((dir / ("image-" + std::to_string(i) + ".jpg")).c_str(), "wb");
    TANDEM_CHECK(f != nullptr, ErrorCode::kNotFound, "cannot write into {}", dir.string());
    bool ok = std::fwrite(jpeg.data(), 1, jpeg.size(), f) == jpeg.size();
    ok = std::fclose(f) == 0 && ok;
    TANDEM_CHECK(ok, ErrorCode::kDataLoss, "writing {} bytes into {} failed", jpeg.size(), dir.string());
  }
  std::printf("%d JPEGs 500x375 q90 written into %s\n", a.images, a.write_folder.c_str());
}

// Where the pipeline's time went, summed over the measured windows of every round. Shares of a
// stage are of its threads' time; waits are in threads (thread-seconds per second of wall).
void print_stages(const PipelineRound& total) {
  std::printf("consumer waited for a batch %.1f%% of the time\n", 100 * total.consumer_wait / total.seconds);
  std::printf("  %-22s %7s %6s %14s %14s %12s\n", "stage", "threads", "busy", "consumer wait", "producer wait",
              "input wait");
  for (const StageSnapshot& s : total.stages) {
    std::printf("  %-22s %7d %5.1f%% %14.2f %14.2f %12.2f\n", s.name.c_str(), s.parallelism,
                100 * s.busy_seconds / (total.seconds * s.parallelism), s.consumer_wait_seconds / total.seconds,
                s.producer_wait_seconds / total.seconds, s.input_wait_seconds / total.seconds);
  }
  std::printf("  (busy: share of the stage's threads' time in its work; waits: threads blocked on average;\n"
              "   consumer: the next stage waited for this one; producer: its threads waited for room;\n"
              "   input: its threads waited for their input, the pull lock included)\n");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The best round of each side, each round's ratio of rates and of images per core-second (the
// work each side spends per image, whatever share of the cores other processes left it), and
// where the pipeline's time went over all rounds.
struct Summary {
  double plain = 0, pipe = 0;
  std::vector<double> ratios, per_core_ratios;
  PipelineRound total;
};

// The two sides alternate in short rounds, so load from other processes drifting over the run
// does not favour one side; each round's ratio compares neighbours in time.
Summary run_rounds(const std::vector<std::string>& jpegs, const std::vector<std::string>& files, const Args& a) {
  const bool plain_side = a.side != "pipeline", pipe_side = a.side != "plain";
  const double seconds = a.seconds / a.rounds;
  Summary s;
  for (int round = 0; round < a.rounds; ++round) {
    Rate p = plain_side ? plain_decode_rate(jpegs, a.threads, seconds, 0.2) : Rate{};
    PipelineRound r = pipe_side ? pipeline_round(files, a, seconds, 0.3) : PipelineRound{};
    Rate q{r.seconds > 0 ? static_cast<double>(r.images) / r.seconds : 0, r.seconds > 0 ? r.cpu_seconds / r.seconds : 0};
    std::printf("round %d: plain %7.1f images/s on %.2f cores, pipeline %7.1f images/s on %.2f cores", round + 1,
                p.images_per_second, p.cores, q.images_per_second, q.cores);
    if (p.images_per_second > 0 && q.images_per_second > 0) {
      s.ratios.push_back(q.images_per_second / p.images_per_second);
      s.per_core_ratios.push_back((q.images_per_second / q.cores) / (p.images_per_second / p.cores));
      std::printf(", ratio %.2f (per core %.2f)", s.ratios.back(), s.per_core_ratios.back());
    }
    std::printf("\n");
    s.plain = std::max(s.plain, p.images_per_second);
    s.pipe = std::max(s.pipe, q.images_per_second);
    s.total.images += r.images;
    s.total.seconds += r.seconds;
    s.total.consumer_wait += r.consumer_wait;
    accumulate(&s.total.stages, r.stages, +1);
  }
  return s;
}

void print_summary(const Summary& s) {
  std::printf("plain libjpeg-turbo decode (full size), best round: %8.1f images/s\n", s.plain);
  std::printf("pipeline (read, decode, crop 224, flip, batch), best: %8.1f images/s\n", s.pipe);
  if (s.ratios.empty()) return;
  std::printf("ratio pipeline / plain decode: median of rounds %.2f, best / best %.2f  (goal >= 0.90)\n",
              median(s.ratios), s.pipe / s.plain);
  std::printf("images per core-second, pipeline / plain: median of rounds %.2f\n", median(s.per_core_ratios));
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (!a.write_folder.empty()) {
    write_folder(a);
    return 0;
  }
  // Augmentation draws from the record's path too: the checksum needs the same path every run.
  std::string tag = a.checksum ? "checksum" : std::to_string(::getpid());
  auto dir = std::filesystem::temp_directory_path() / ("tandem-pipeline-bench-" + tag);
  std::filesystem::create_directories(dir);
  std::vector<std::string> jpegs;
  std::vector<std::string> files = write_images(a, dir, &jpegs);
  size_t bytes = 0;
  for (const auto& j : jpegs) bytes += j.size();
  std::printf("%d JPEGs 500x375 q90 (%.0f KiB average) in %zu TFRecord files; %d threads, batch %d\n", a.images,
              static_cast<double>(bytes) / jpegs.size() / 1024, files.size(), a.threads, a.batch);
  if (a.checksum) {
    print_checksum(files, a);
    std::filesystem::remove_all(dir);
    return 0;
  }
  std::printf("%.1f s per side in %d alternating rounds\n", a.seconds, a.rounds);
  Summary summary = run_rounds(jpegs, files, a);
  print_summary(summary);
  if (a.side != "plain") print_stages(summary.total);
  std::filesystem::remove_all(dir);
  return 0;
}
