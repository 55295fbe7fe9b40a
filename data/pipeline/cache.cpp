// cache(): the first complete pass of the input is kept in memory and later passes replay it,
// so decoding or reading happens once. A pass that stops early (take, an error) caches nothing.
#include <mutex>

#include "data/pipeline/nodes.h"
#include "engine/core/error.h"

namespace tandem::data::nodes {
namespace {

struct CacheState {
  std::mutex mutex;
  std::shared_ptr<const std::vector<Element>> elements;  // set once a pass completed
};

class CacheNode final : public DatasetNode {
 public:
  explicit CacheNode(Node input) : input_(std::move(input)), state_(std::make_shared<CacheState>()) {}

  std::unique_ptr<Iterator> make_iterator(const IteratorContext& ctx) const override {
    std::shared_ptr<const std::vector<Element>> cached;
    {
      std::lock_guard lock(state_->mutex);
      cached = state_->elements;
    }
    if (cached) {
      struct Replay final : Iterator {
        std::shared_ptr<const std::vector<Element>> elements;
        size_t pos = 0;
        bool next(Element* out) override {
          if (pos >= elements->size()) return false;
          *out = (*elements)[pos++];
          return true;
        }
      };
      auto it = std::make_unique<Replay>();
      it->elements = std::move(cached);
      return it;
    }
    struct Fill final : Iterator {
      std::unique_ptr<Iterator> input;
      std::shared_ptr<CacheState> state;
      std::vector<Element> seen;
      bool next(Element* out) override {
        if (!input->next(out)) {
          std::lock_guard lock(state->mutex);
          if (!state->elements) state->elements = std::make_shared<const std::vector<Element>>(std::move(seen));
          return false;
        }
        seen.push_back(*out);
        return true;
      }
    };
    auto it = std::make_unique<Fill>();
    it->input = input_->make_iterator(ctx);
    it->state = state_;
    return it;
  }

 private:
  Node input_;
  std::shared_ptr<CacheState> state_;
};

}  // namespace

Node cache(Node input, std::string filename) {
  TANDEM_CHECK(filename.empty(), ErrorCode::kUnimplemented,
               "cache(filename='{}'): caching to a file is not implemented yet; use cache() in memory", filename);
  return std::make_shared<CacheNode>(std::move(input));
}

}  // namespace tandem::data::nodes
