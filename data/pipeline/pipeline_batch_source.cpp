#include "data/pipeline/pipeline_batch_source.h"

#include <fmt/ranges.h>

#include "engine/core/error.h"

namespace tandem::data {

PipelineBatchSource::PipelineBatchSource(Dataset dataset, bool channels_last, PipelineBudget budget)
    : dataset_(std::move(dataset)), channels_last_(channels_last), budget_(budget) {}

PipelineBatchSource::PipelineBatchSource(Dataset dataset, std::vector<std::string> names, PipelineBudget budget)
    : dataset_(std::move(dataset)), names_(std::move(names)), budget_(budget) {
  TANDEM_CHECK(!names_.empty(), ErrorCode::kInvalidArgument, "PipelineBatchSource: no tensor names given");
}

void PipelineBatchSource::bind(ExecutionContext& ctx) {
  device_ = ctx.device();
  compute_ = &ctx.stream();
}

void PipelineBatchSource::start_epoch(int64_t epoch) {
  if (prefetcher_) copied_before_ += prefetcher_->stats().copy_seconds;
  prefetcher_.reset();  // waits for its copies, then lets go of its iterator's threads
  iterator_.reset();    // stops and joins the previous epoch's threads first
  iterator_.emplace(dataset_.make_iterator(epoch, budget_));
  if (!device_.is_cpu()) {
    prefetcher_ = std::make_unique<DevicePrefetcher>(std::move(*iterator_), device_, compute_);
    iterator_.reset();
  }
}

bool PipelineBatchSource::next(Batch& batch) {
  TANDEM_CHECK(iterator_.has_value() || prefetcher_, ErrorCode::kFailedPrecondition,
               "batch source: next() before start_epoch()");
  Element element;
  if (prefetcher_) {
    if (!prefetcher_->next(&element.tensors)) return false;
  } else if (!iterator_->next(&element)) {
    return false;
  }
  if (names_.empty()) {
    fill_image_batch(element, channels_last_, batch);
    return true;
  }
  TANDEM_CHECK(element.tensors.size() == names_.size(), ErrorCode::kInvalidArgument,
               "loader batch from {} has {} tensor(s) for the {} name(s) given ({})", element.file,
               element.tensors.size(), names_.size(), fmt::join(names_, ", "));
  for (size_t i = 0; i < names_.size(); ++i) batch.set(names_[i], element.tensors[i]);
  return true;
}

std::unique_ptr<PipelineBatchSource> make_batch_source(const PipelineConfig& config, Dataset dataset,
                                                       bool channels_last, PipelineBudget budget) {
  if (config.tokens) {
    return std::make_unique<PipelineBatchSource>(std::move(dataset), std::vector<std::string>{kTokensBatchName},
                                                 budget);
  }
  return std::make_unique<PipelineBatchSource>(std::move(dataset), channels_last, budget);
}

void fill_image_batch(const Element& element, bool channels_last, Batch& batch) {
  TANDEM_CHECK(element.tensors.size() >= 2, ErrorCode::kInvalidArgument,
               "loader batch from {} has {} tensors; the training loop needs an image and a label "
               "(set data.image.label_key)",
               element.file, element.tensors.size());
  const Tensor& images = element.tensors[0];
  const Tensor& labels = element.tensors[1];
  TANDEM_CHECK(images.rank() == 4 && images.dtype() == DType::kF32, ErrorCode::kInvalidArgument,
               "loader batch: images are {}; the training loop needs normalised f32 images of rank 4 "
               "(set data.image.normalize: true)",
               images.describe());
  TANDEM_CHECK(labels.rank() == 1 && labels.dtype() == DType::kI64 && labels.dim(0) == images.dim(0),
               ErrorCode::kInvalidArgument, "loader batch: labels are {} for images {}", labels.describe(),
               images.describe());
  const Shape& s = images.shape();
  batch.set("image", channels_last ? images.view({s[0], s[3], s[1], s[2]}, MemoryFormat::kChannelsLast) : images);
  batch.set("label", labels);
}

}  // namespace tandem::data

namespace tandem::data {

double PipelineBatchSource::copy_seconds() const {
  return copied_before_ + (prefetcher_ ? prefetcher_->stats().copy_seconds : 0.0);
}

}  // namespace tandem::data
