#include "engine/train/batch_check.h"

#include "engine/core/error.h"

namespace tandem::train {

void check_batch_matches_model(const Batch& batch, const ModelConfig& model, std::string_view data) {
  const Tensor& x = batch.x;
  TANDEM_CHECK(x.defined() && x.rank() == 4, ErrorCode::kInvalidArgument,
               "the {} gives batches of shape {}, but model '{}' takes (N, C, H, W) images", data,
               x.defined() ? x.shape().str() : std::string("(none)"), model.name);
  const bool channels_ok = model.in_channels <= 0 || x.dim(1) == model.in_channels;
  const bool size_ok = model.input_size <= 0 || (x.dim(2) == model.input_size && x.dim(3) == model.input_size);
  TANDEM_CHECK(channels_ok && size_ok, ErrorCode::kInvalidArgument,
               "the {} gives images of {} channel(s) x {} x {} (batch {}), but the model is configured for "
               "model.in_channels {} and model.input_size {} ({} x {} x {}): make data.image (height, width, "
               "channels, or raw_shape for raw records) produce that, or change model.input_size and "
               "model.in_channels to match the data",
               data, x.dim(1), x.dim(2), x.dim(3), x.shape().str(), model.in_channels, model.input_size,
               model.in_channels, model.input_size, model.input_size);
  TANDEM_CHECK(batch.labels.defined() && batch.labels.rank() == 1 && batch.labels.dim(0) == x.dim(0),
               ErrorCode::kInvalidArgument, "the {} gives {} label(s) ({}) for a batch of {} image(s) ({})", data,
               batch.labels.defined() ? batch.labels.numel() : 0,
               batch.labels.defined() ? batch.labels.shape().str() : std::string("none"), x.dim(0), x.shape().str());
}

}  // namespace tandem::train
