// The bridge from the data pipeline to the training loop: a BatchSource over one replica's
// Dataset of images and labels, turning each loader batch into the batch image classification
// takes: "image" (N, C, H, W) f32 (a contiguous NHWC batch is viewed as channels_last without a
// copy) and "label" (N) i64, the names of train::ImageClassification; or, for token windows
// (data.tokens), "tokens" (N, block_size + 1) i64 as a language model takes them. On a GPU
// replica a DevicePrefetcher stages each batch in pinned memory and copies it on its own stream.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/pipeline/dataset.h"
#include "data/pipeline/device_prefetcher.h"
#include "data/pipeline/pipeline_config.h"
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

// The batch name of token windows: (N, length) i64.
inline constexpr const char* kTokensBatchName = "tokens";

// The source of one replica's batches from a data section: an image classification batch, or
// {"tokens"} when the section's records are token windows (config.tokens).
std::unique_ptr<PipelineBatchSource> make_batch_source(const PipelineConfig& config, Dataset dataset,
                                                       bool channels_last, PipelineBudget budget);

// Sets "image" and "label" of batch from one loader batch {image (N, H, W, C) or (N, C, H, W),
// label (N)}, reusing the batch's entries.
void fill_image_batch(const Element& element, bool channels_last, Batch& batch);

}  // namespace tandem::data
