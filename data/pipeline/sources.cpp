// Source datasets: a range of numbers, elements held in memory, a list of files, and the
// records of one TFRecord file (whose reader errors carry the path and offset already).
#include <algorithm>

#include "data/pipeline/nodes.h"
#include "engine/core/error.h"
#include "engine/core/random.h"

namespace tandem::data::nodes {
namespace {

class RangeNode final : public DatasetNode {
 public:
  RangeNode(int64_t begin, int64_t end) : begin_(begin), end_(end) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    struct It final : Iterator {
      int64_t next_value, end, epoch;
      It(int64_t b, int64_t e, int64_t ep) : next_value(b), end(e), epoch(ep) {}
      bool next(Element* out) override {
        if (next_value >= end) return false;
        *out = Element{};
        out->record = next_value;
        out->epoch = epoch;
        out->tensors.push_back(scalar_i64(next_value++));
        return true;
      }
    };
    return std::make_unique<It>(begin_, end_, ctx.epoch);
  }

 private:
  int64_t begin_, end_;
};

class ElementsNode final : public DatasetNode {
 public:
  explicit ElementsNode(std::vector<Element> elements)
      : elements_(std::make_shared<const std::vector<Element>>(std::move(elements))) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    struct It final : Iterator {
      std::shared_ptr<const std::vector<Element>> elements;
      size_t pos = 0;
      int64_t epoch;
      It(std::shared_ptr<const std::vector<Element>> e, int64_t ep) : elements(std::move(e)), epoch(ep) {}
      bool next(Element* out) override {
        if (pos >= elements->size()) return false;
        *out = (*elements)[pos++];
        out->epoch = epoch;
        return true;
      }
    };
    return std::make_unique<It>(elements_, ctx.epoch);
  }

 private:
  std::shared_ptr<const std::vector<Element>> elements_;
};

std::vector<Element> file_elements(const std::vector<std::string>& files) {
  std::vector<Element> out(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    out[i].text = files[i];
    out[i].file = files[i];
    out[i].record = static_cast<int64_t>(i);
  }
  return out;
}

// The file list, permuted per epoch when asked: the same seed and epoch give the same order.
class FilesNode final : public DatasetNode {
 public:
  FilesNode(std::vector<std::string> files, bool shuffle, uint64_t seed)
      : elements_(file_elements(files)), shuffle_(shuffle), seed_(seed) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    std::vector<Element> order = elements_;
    if (shuffle_) {
      Generator rng(seed_, static_cast<uint64_t>(ctx.epoch));
      for (size_t i = order.size(); i > 1; --i) {
        std::swap(order[i - 1], order[rng.below(i)]);
      }
    }
    return ElementsNode(std::move(order)).make_iterator(ctx);
  }

 private:
  std::vector<Element> elements_;
  bool shuffle_;
  uint64_t seed_;
};

class TFRecordNode final : public DatasetNode {
 public:
  TFRecordNode(std::string path, TFRecordReaderOptions options) : path_(std::move(path)), options_(std::move(options)) {}
  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    struct It final : Iterator {
      TFRecordReader reader;
      int64_t epoch;
      std::shared_ptr<StageStats> stats;
      It(const std::string& p, const TFRecordReaderOptions& o, int64_t e, std::shared_ptr<StageStats> s)
          : reader(p, o), epoch(e), stats(std::move(s)) {}
      bool next(Element* out) override {
        BusyTimer timer(stats.get());
        std::string_view record;
        if (!reader.next(&record)) return false;
        out->text.assign(record.data(), record.size());
        out->tensors.clear();
        out->file = reader.path();
        out->record = static_cast<int64_t>(reader.next_index()) - 1;
        out->epoch = epoch;
        stats->elements.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    };
    // Every file of a pipeline shares one "read" stage in the statistics.
    auto stats = ctx.stats ? ctx.stats->stage(&kReadStage, "read(tfrecord)") : std::make_shared<StageStats>("read");
    return std::make_unique<It>(path_, options_, ctx.epoch, std::move(stats));
  }

 private:
  static constexpr int kReadStage = 0;
  std::string path_;
  TFRecordReaderOptions options_;
};

}  // namespace

Node range(int64_t begin, int64_t end) { return std::make_shared<RangeNode>(begin, end); }
Node from_elements(std::vector<Element> elements) { return std::make_shared<ElementsNode>(std::move(elements)); }
Node from_files(std::vector<std::string> files, bool shuffle, uint64_t seed) {
  return std::make_shared<FilesNode>(std::move(files), shuffle, seed);
}
Node tfrecord(std::string path, TFRecordReaderOptions options) {
  return std::make_shared<TFRecordNode>(std::move(path), std::move(options));
}

}  // namespace tandem::data::nodes
