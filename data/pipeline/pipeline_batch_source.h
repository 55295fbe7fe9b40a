// The bridge from the data pipeline to the training loop: a BatchSource over one replica's
// Dataset of images and labels, turning each loader batch into the batch image classification
// takes: "image" (N, C, H, W) f32 (a contiguous NHWC batch is viewed as channels_last without a
// copy) and "label" (N) i64, the names of train::ImageClassification. On a GPU
// replica a DevicePrefetcher stages each batch in pinned memory and copies it on its own stream.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/pipeline/dataset.h"
#include "data/pipeline/device_prefetcher.h"
#include "engine/core/batch.h"

namespace tandem::data {

class PipelineBatchSource final : public BatchSource {
 public:
  // Image classification: channels_last says the pipeline lays images out NHWC (else NCHW);
  // budget: this replica's share.
  PipelineBatchSource(Dataset dataset, bool channels_last, PipelineBudget budget);
  // Any batched dataset: element tensor i becomes the batch's tensor names[i], as it is.
  PipelineBatchSource(Dataset dataset, std::vector<std::string> names, PipelineBudget budget = {});

  void bind(ExecutionContext& ctx) override;
  void start_epoch(int64_t epoch) override;
  bool next(Batch& batch) override;
  // Host time staging batches in pinned memory and queueing their copies (the copies themselves
  // overlap the step on the device).
  double copy_seconds() const override;

 private:
  Dataset dataset_;
  bool channels_last_ = false;
  std::vector<std::string> names_;  // empty: an image classification batch
  PipelineBudget budget_;
  std::optional<DatasetIterator> iterator_;
  Device device_ = Device::cpu();
  Stream* compute_ = nullptr;
  std::unique_ptr<DevicePrefetcher> prefetcher_;  // GPU replicas only
  double copied_before_ = 0;  // copy seconds of earlier epochs' prefetchers
};

// Sets "image" and "label" of batch from one loader batch {image (N, H, W, C) or (N, C, H, W),
// label (N)}, reusing the batch's entries.
void fill_image_batch(const Element& element, bool channels_last, Batch& batch);

}  // namespace tandem::data
