// The bridge from the data pipeline to the training loop: a train::BatchSource over one
// replica's data::Dataset, turning each loader batch into the (N, C, H, W) tensors the
// model takes (a contiguous NHWC batch is viewed as channels_last without a copy). On a GPU
// replica a DevicePrefetcher stages each batch in pinned memory and copies it on its own stream.
#pragma once

#include <memory>
#include <optional>

#include "data/pipeline/dataset.h"
#include "data/pipeline/device_prefetcher.h"
#include "engine/train/batch_source.h"

namespace tandem::tools {

class PipelineBatchSource final : public train::BatchSource {
 public:
  // channels_last: the pipeline lays images out NHWC (else NCHW); budget: this replica's share.
  PipelineBatchSource(data::Dataset dataset, bool channels_last, data::PipelineBudget budget);

  void bind(ExecutionContext& ctx) override;
  void start_epoch(int64_t epoch) override;
  bool next(train::Batch& batch) override;
  // Host time staging batches in pinned memory and queueing their copies (the copies themselves
  // overlap the step on the device).
  double copy_seconds() const override;

 private:
  data::Dataset dataset_;
  bool channels_last_;
  data::PipelineBudget budget_;
  std::optional<data::DatasetIterator> iterator_;
  Device device_ = Device::cpu();
  Stream* compute_ = nullptr;
  std::unique_ptr<data::DevicePrefetcher> prefetcher_;  // GPU replicas only
  double copied_before_ = 0;  // copy seconds of earlier epochs' prefetchers
};

// Converts one loader batch {image (N, H, W, C) or (N, C, H, W), label (N)} into a Batch.
train::Batch to_batch(const data::Element& element, bool channels_last);

}  // namespace tandem::tools
