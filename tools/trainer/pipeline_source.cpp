#include "tools/trainer/pipeline_source.h"

#include "engine/core/error.h"

namespace tandem::tools {

PipelineBatchSource::PipelineBatchSource(data::Dataset dataset, bool channels_last, data::PipelineBudget budget)
    : dataset_(std::move(dataset)), channels_last_(channels_last), budget_(budget) {}

void PipelineBatchSource::start_epoch(int64_t epoch) {
  iterator_.reset();  // stops and joins the previous epoch's threads first
  iterator_.emplace(dataset_.make_iterator(epoch, budget_));
}

bool PipelineBatchSource::next(train::Batch& batch) {
  TANDEM_CHECK(iterator_.has_value(), ErrorCode::kFailedPrecondition, "batch source: next() before start_epoch()");
  data::Element element;
  if (!iterator_->next(&element)) return false;
  batch = to_batch(element, channels_last_);
  return true;
}

train::Batch to_batch(const data::Element& element, bool channels_last) {
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
  train::Batch batch;
  batch.x = channels_last ? images.view({s[0], s[3], s[1], s[2]}, MemoryFormat::kChannelsLast) : images;
  batch.labels = labels;
  return batch;
}

}  // namespace tandem::tools
