// TFRecord read + CRC throughput beside a plain read of the same file bytes and a memory scan
// of them (the limits), and tf.Example parse rate: full protobuf against the fast path.
// Run: build-data/bench/tfrecord_bench (figures and the command in docs/PERFORMANCE.md).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "data/crc32c.h"
#include "data/example.h"
#include "data/example_fast.h"
#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
#include "engine/core/checksum.h"
#include "engine/core/random.h"
#include "third_party/tensorflow/example.pb.h"

namespace {

using namespace tandem::data;

// An MNIST-like record (784 raw bytes, a label, sizes) or a 100 KB "photo" record.
std::string make_record(tandem::Generator& g, size_t image_bytes) {
  std::string pixels(image_bytes, '\0');
  for (char& c : pixels) c = static_cast<char>(g.next_u32());
  return serialize_example({{"image/encoded", Feature::of_bytes({pixels})},
                            {"image/class/label", Feature::of_ints({static_cast<int64_t>(g.below(10))})},
                            {"image/height", Feature::of_ints({28})},
                            {"image/width", Feature::of_ints({28})},
                            {"image/format", Feature::of_bytes({"raw"})}});
}

struct Corpus {
  std::string path;
  std::string file_bytes;
  std::vector<std::string> records;
};

std::map<size_t, Corpus> g_corpora;  // by image size, made on first use

const Corpus& corpus(size_t image_bytes) {
  Corpus& c = g_corpora[image_bytes];
  if (!c.path.empty()) return c;
  c.path = (std::filesystem::temp_directory_path() / ("tandem_bench_" + std::to_string(image_bytes) + ".tfrecord")).string();
  tandem::Generator g(1);
  TFRecordWriter w(c.path);
  for (size_t total = 0; total < (128u << 20);) {
    c.records.push_back(make_record(g, image_bytes));
    total += c.records.back().size() + 16;
    w.write(c.records.back());
  }
  w.close();
  c.file_bytes.resize(std::filesystem::file_size(c.path));
  int fd = ::open(c.path.c_str(), O_RDONLY);
  size_t got = 0;
  while (got < c.file_bytes.size()) got += static_cast<size_t>(::read(fd, c.file_bytes.data() + got, c.file_bytes.size() - got));
  ::close(fd);
  return c;
}

// The limit: the file's bytes through read() in 256 KiB chunks, nothing else.
void BM_PlainFileRead(benchmark::State& state) {
  const Corpus& c = corpus(state.range(0));
  std::vector<char> buf(256 * 1024);
  for (auto _ : state) {
    int fd = ::open(c.path.c_str(), O_RDONLY);
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) benchmark::DoNotOptimize(buf.data());
    ::close(fd);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.file_bytes.size()));
}

// The other limit: the same bytes already in memory, summed 8 bytes at a time.
void BM_PlainMemoryScan(benchmark::State& state) {
  const Corpus& c = corpus(state.range(0));
  for (auto _ : state) {
    uint64_t sum = 0;
    const char* p = c.file_bytes.data();
    for (size_t i = 0; i + 8 <= c.file_bytes.size(); i += 8) {
      uint64_t v;
      std::memcpy(&v, p + i, 8);
      sum += v;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.file_bytes.size()));
}

void BM_Crc32cInMemory(benchmark::State& state) {
  const Corpus& c = corpus(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(crc32c(c.file_bytes.data(), c.file_bytes.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.file_bytes.size()));
}

// The checkpoints' per-tensor checksum (engine/core/checksum: the CPU's CRC32 instruction, one
// stream) on the same bytes, beside ISA-L's (above): the cost a checkpoint save and load pay.
void BM_CheckpointChecksumInMemory(benchmark::State& state) {
  const Corpus& c = corpus(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tandem::checksum_crc32c(c.file_bytes.data(), c.file_bytes.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.file_bytes.size()));
}

void read_file(benchmark::State& state, bool verify) {
  const Corpus& c = corpus(state.range(0));
  TFRecordReaderOptions o;
  o.verify_crc = verify;
  o.compression = Compression::kNone;
  for (auto _ : state) {
    TFRecordReader reader(c.path, o);
    std::string_view r;
    while (reader.next(&r)) benchmark::DoNotOptimize(r.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.file_bytes.size()));
}

void BM_TFRecordReadCrc(benchmark::State& state) { read_file(state, true); }
void BM_TFRecordReadNoCrc(benchmark::State& state) { read_file(state, false); }

void BM_ParseProtobufMessage(benchmark::State& state) {
  const Corpus& c = corpus(state.range(0));
  tensorflow::Example example;
  size_t i = 0;
  for (auto _ : state) {
    const std::string& r = c.records[i++ % c.records.size()];
    example.ParseFromArray(r.data(), static_cast<int>(r.size()));
    benchmark::DoNotOptimize(example.features().feature_size());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_ParseToFeatureMap(benchmark::State& state) {
  const Corpus& c = corpus(state.range(0));
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(parse_example(c.records[i++ % c.records.size()]));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_ParseFastTwoKeys(benchmark::State& state) {
  const Corpus& c = corpus(state.range(0));
  FastExampleParser parser({"image/encoded", "image/class/label"});
  size_t i = 0;
  for (auto _ : state) {
    parser.parse(c.records[i++ % c.records.size()]);
    benchmark::DoNotOptimize(parser.feature(1).ints.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

#define SIZES Arg(784)->Arg(100000)->Unit(benchmark::kMillisecond)
BENCHMARK(BM_PlainMemoryScan)->SIZES;
BENCHMARK(BM_PlainFileRead)->SIZES;
BENCHMARK(BM_Crc32cInMemory)->SIZES;
BENCHMARK(BM_CheckpointChecksumInMemory)->SIZES;
BENCHMARK(BM_TFRecordReadCrc)->SIZES;
BENCHMARK(BM_TFRecordReadNoCrc)->SIZES;
BENCHMARK(BM_ParseProtobufMessage)->Arg(784)->Arg(100000);
BENCHMARK(BM_ParseToFeatureMap)->Arg(784)->Arg(100000);
BENCHMARK(BM_ParseFastTwoKeys)->Arg(784)->Arg(100000);

// Prints, after the table, read + CRC as a fraction of the plain read of the same bytes.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) rates_[r.benchmark_name()] = it->second.value;
      auto items = r.counters.find("items_per_second");
      if (items != r.counters.end()) rates_[r.benchmark_name()] = items->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    for (const char* size : {"784", "100000"}) {
      double read = rates_[std::string("BM_TFRecordReadCrc/") + size];
      double plain = rates_[std::string("BM_PlainFileRead/") + size];
      double memory = rates_[std::string("BM_PlainMemoryScan/") + size];
      double proto = rates_[std::string("BM_ParseProtobufMessage/") + size];
      double fast = rates_[std::string("BM_ParseFastTwoKeys/") + size];
      if (plain > 0 && memory > 0) {
        std::printf("records of %s-byte images: read+CRC %.0f MB/s = %.2f x plain file read (%.0f MB/s), "
                    "%.2f x memory scan (%.0f MB/s); parse: protobuf %.0f rec/s, fast path %.0f rec/s (%.1fx)\n",
                    size, read / 1e6, read / plain, plain / 1e6, read / memory, memory / 1e6, proto, fast,
                    proto > 0 ? fast / proto : 0.0);
      }
    }
  }

 private:
  std::map<std::string, double> rates_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  for (const auto& [size, c] : g_corpora) std::filesystem::remove(c.path);
  return 0;
}
