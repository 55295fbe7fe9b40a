// cache(): the first complete pass of the input is kept, and later passes replay it, so
// reading and decoding happen once. In memory when no filename is given; else in a cache file
// (cache_file.h) that later passes, and later runs and processes, read instead of the input.
// A pass that stops early (take, an error, an iterator destroyed mid-epoch) caches nothing.
// Replayed elements carry the epoch of the pass that replays them, as a fresh read would, so
// the random augmentation after a cache differs from epoch to epoch.
#include <spdlog/spdlog.h>

#include <mutex>

#include "data/pipeline/cache_file.h"
#include "data/pipeline/nodes.h"
#include "engine/core/error.h"

namespace tandem::data::nodes {
namespace {

struct CacheState {
  std::mutex mutex;
  std::shared_ptr<const std::vector<Element>> elements;  // set once a pass completed
};

class MemoryReplay final : public Iterator {
 public:
  MemoryReplay(std::shared_ptr<const std::vector<Element>> elements, int64_t epoch)
      : elements_(std::move(elements)), epoch_(epoch) {}
  bool next(Element* out) override {
    if (pos_ >= elements_->size()) return false;
    *out = (*elements_)[pos_++];
    out->epoch = epoch_;
    return true;
  }

 private:
  std::shared_ptr<const std::vector<Element>> elements_;
  int64_t epoch_;
  size_t pos_ = 0;
};

class MemoryFill final : public Iterator {
 public:
  MemoryFill(std::unique_ptr<Iterator> input, std::shared_ptr<CacheState> state)
      : input_(std::move(input)), state_(std::move(state)) {}
  bool next(Element* out) override {
    if (failed_) return false;
    bool got = false;
    try {
      got = input_->next(out);
    } catch (...) {
      // A stage that threw may end (or go on past the failed element) when asked again: that
      // end must not complete a cache that lacks elements.
      failed_ = true;
      throw;
    }
    if (!got) {
      std::lock_guard lock(state_->mutex);
      if (!state_->elements) state_->elements = std::make_shared<const std::vector<Element>>(std::move(seen_));
      return false;
    }
    seen_.push_back(*out);
    return true;
  }

 private:
  std::unique_ptr<Iterator> input_;
  std::shared_ptr<CacheState> state_;
  std::vector<Element> seen_;
  bool failed_ = false;
};

class MemoryCacheNode final : public DatasetNode {
 public:
  explicit MemoryCacheNode(Node input) : input_(std::move(input)), state_(std::make_shared<CacheState>()) {}

  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    std::shared_ptr<const std::vector<Element>> cached;
    {
      std::lock_guard lock(state_->mutex);
      cached = state_->elements;
    }
    if (cached) return std::make_unique<MemoryReplay>(std::move(cached), ctx.epoch);
    return std::make_unique<MemoryFill>(input_->make_iterator(ctx), state_);
  }

 private:
  Node input_;
  std::shared_ptr<CacheState> state_;
};

class FileReplay final : public Iterator {
 public:
  FileReplay(std::unique_ptr<CacheFileReader> reader, int64_t epoch) : reader_(std::move(reader)), epoch_(epoch) {}
  bool next(Element* out) override {
    if (!reader_->next(out)) return false;
    out->epoch = epoch_;
    return true;
  }

 private:
  std::unique_ptr<CacheFileReader> reader_;
  int64_t epoch_;
};

// Passes the input through and writes it down; the file appears only when the input ends.
class FileFill final : public Iterator {
 public:
  FileFill(std::unique_ptr<Iterator> input, const std::string& path)
      : input_(std::move(input)), path_(path), writer_(std::make_unique<CacheFileWriter>(path)) {}
  bool next(Element* out) override {
    if (!writer_) return false;  // committed or failed: the input is not asked again
    try {
      if (input_->next(out)) {
        writer_->append(*out);
        return true;
      }
      writer_->commit();
    } catch (...) {
      // As for MemoryFill, an error ends the pass, whether it came from the input, from writing
      // (an element that cannot be stored, a full disk) or from completing the file: a writer
      // kept alive could later commit a file that lacks the failed element, and one that failed
      // to commit would report "committed twice" on the next call instead of the real cause.
      writer_.reset();  // removes the temporary file
      throw;
    }
    spdlog::info("cache: wrote {} elements ({:.1f} MiB) to {}; later passes read it", writer_->elements(),
                 static_cast<double>(writer_->bytes()) / (1 << 20), path_);
    writer_.reset();
    return false;
  }

 private:
  std::unique_ptr<Iterator> input_;
  std::string path_;
  std::unique_ptr<CacheFileWriter> writer_;  // destroyed uncommitted: its temp file goes too
};

class FileCacheNode final : public DatasetNode {
 public:
  FileCacheNode(Node input, std::string path) : input_(std::move(input)), path_(std::move(path)) {}

  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    std::string why;
    if (auto reader = CacheFileReader::open(path_, &why)) {
      spdlog::debug("cache: reading {} elements from {}", reader->elements(), path_);
      return std::make_unique<FileReplay>(std::move(reader), ctx.epoch);
    }
    // A file that fails the checks at open is rebuilt rather than fatal: nothing was delivered
    // from it yet, and the input it was made from is still there.
    if (!why.empty()) spdlog::warn("cache file {} is unusable ({}); rebuilding it from the input", path_, why);
    return std::make_unique<FileFill>(input_->make_iterator(ctx), path_);
  }

 private:
  Node input_;
  std::string path_;
};

}  // namespace

Node cache(Node input, std::string filename) {
  if (filename.empty()) return std::make_shared<MemoryCacheNode>(std::move(input));
  return std::make_shared<FileCacheNode>(std::move(input), std::move(filename));
}

}  // namespace tandem::data::nodes
