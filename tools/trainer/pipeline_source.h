// The bridge from the data pipeline to the training loop: a train::BatchSource over one
// replica's data::Dataset, turning each loader batch into the (N, C, H, W) tensors the
// model takes (a contiguous NHWC batch is viewed as channels_last without a copy).
#pragma once

#include <memory>
#include <optional>

#include "data/pipeline/dataset.h"
#include "engine/train/batch_source.h"

namespace tandem::tools {

class PipelineBatchSource final : public train::BatchSource {
 public:
  // channels_last: the pipeline lays images out NHWC (else NCHW); budget: this replica's share.
  PipelineBatchSource(data::Dataset dataset, bool channels_last, data::PipelineBudget budget);

  void start_epoch(int64_t epoch) override;
  bool next(train::Batch& batch) override;

 private:
  data::Dataset dataset_;
  bool channels_last_;
  data::PipelineBudget budget_;
  std::optional<data::DatasetIterator> iterator_;
};

// Converts one loader batch {image (N, H, W, C) or (N, C, H, W), label (N)} into a Batch.
train::Batch to_batch(const data::Element& element, bool channels_last);

}  // namespace tandem::tools
