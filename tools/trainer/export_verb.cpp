// `trainer export --checkpoint DIR --format onnx --output FILE.onnx [--opset N]`: the checkpoint's
// model in eval form as an ONNX file (engine/export), its input described in the file's metadata
// from the run's config (the eval_data pipeline's size and normalisation). docs/EXPORT.md.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>

#include "data/pipeline/pipeline_config.h"
#include "engine/export/onnx_export.h"
#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/config.h"
#include "models/registry.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {
namespace {

struct ExportArgs {
  std::string checkpoint, format = "onnx", output;
  int opset = exporter::kMaxOnnxOpset;
};

// The eval pipeline's image options (eval_data, else data), for the metadata.
data::ImageMapOptions eval_image(const std::string& config_text) {
  const YAML::Node root = YAML::Load(config_text);
  return data::parse_pipeline_config(config_text, root["eval_data"] ? "eval_data" : "data").image;
}

exporter::OnnxInputSpec token_input(const train::ModelConfig& m) {
  exporter::OnnxInputSpec in;
  in.name = "input_ids";
  in.dtype = DType::kI64;
  in.layout = "NT";
  in.vocab_size = m.vocab_size;
  // The traces probe one token shorter and check one longer (onnx_trace.h): a window below the
  // block size leaves room for both.
  in.shape = {2, std::clamp<int64_t>(m.block_size - 1, 1, 8)};
  in.dynamic_axes = {{0, "batch"}};
  if (m.block_size >= 3) in.dynamic_axes[1] = "sequence";
  in.metadata["vocab_size"] = std::to_string(m.vocab_size);
  in.metadata["max_sequence_length"] = std::to_string(m.block_size);
  return in;
}

exporter::OnnxInputSpec image_input(const train::ModelConfig& m, const std::string& config_text) {
  exporter::OnnxInputSpec in;
  in.shape = {2, m.in_channels, m.input_size, m.input_size};
  const data::ImageMapOptions image = eval_image(config_text);
  const auto channels = static_cast<size_t>(m.in_channels);
  if (image.augment.normalize && channels <= image.augment.mean.size()) {
    in.mean.assign(image.augment.mean.begin(), image.augment.mean.begin() + static_cast<ptrdiff_t>(channels));
    in.std.assign(image.augment.std.begin(), image.augment.std.begin() + static_cast<ptrdiff_t>(channels));
    in.metadata["normalization"] = "(pixel / 255 - mean) / std per channel";
  } else {
    in.metadata["normalization"] = "none: the decoded pixel values";
  }
  in.metadata["num_classes"] = std::to_string(m.num_classes);
  return in;
}

int run_export(const ExportArgs& args) {
  const train::CheckpointMeta meta = train::validate_checkpoint(args.checkpoint);
  const train::ModelConfig spec = train::model_config_from_text(meta.config);
  auto model = models::create_model(spec);
  train::CheckpointManager::load(args.checkpoint, *model, nullptr);
  exporter::OnnxInputSpec input = spec.name == "gpt" ? token_input(spec) : image_input(spec, meta.config);
  input.metadata["model"] = spec.name;
  input.metadata["checkpoint_step"] = std::to_string(meta.step);
  const exporter::OnnxExportSummary s = exporter::export_onnx(*model, input, args.output, {.opset = args.opset});
  std::printf("exported %s (step %lld) to %s: ONNX opset %d, %lld nodes, %lld parameters, %.1f MB\n",
              spec.name.c_str(), static_cast<long long>(meta.step), args.output.c_str(), s.opset,
              static_cast<long long>(s.nodes), static_cast<long long>(s.parameters),
              static_cast<double>(s.file_bytes) / 1e6);
  std::vector<std::string> dims;
  for (size_t a = 0; a < input.shape.size(); ++a) {
    const auto axis = input.dynamic_axes.find(static_cast<int>(a));
    dims.push_back(axis != input.dynamic_axes.end() ? axis->second : std::to_string(input.shape[a]));
  }
  std::printf("  input '%s' [%s] %s %s; output '%s'; operators: %s\n", input.name.c_str(),
              fmt::format("{}", fmt::join(dims, ", ")).c_str(), input.layout.c_str(),
              input.dtype == DType::kI64 ? "int64 token ids" : "float32",
              input.output_name.c_str(), fmt::format("{}", fmt::join(s.onnx_ops, " ")).c_str());
  if (!input.mean.empty()) {
    std::printf("  normalised as the eval data: (pixel / 255 - mean) / std, mean [%s], std [%s]\n",
                fmt::format("{}", fmt::join(input.mean, ", ")).c_str(),
                fmt::format("{}", fmt::join(input.std, ", ")).c_str());
  }
  return 0;
}

}  // namespace

void add_export_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* verb = app.add_subcommand("export", "Write a checkpoint's model as an ONNX file (eval form)");
  verb->add_option("--checkpoint", args->checkpoint, "A checkpoint directory (RUN/checkpoints/step-...)")->required();
  verb->add_option("--format", args->format, "The file format")->check(CLI::IsMember({"onnx"}))->capture_default_str();
  verb->add_option("--output", args->output, "The file to write (FILE.onnx)")->required();
  verb->add_option("--opset", args->opset, "ONNX opset (13 to 17; transformers need 17)")
      ->check(CLI::Range(exporter::kMinOnnxOpset, exporter::kMaxOnnxOpset))
      ->capture_default_str();
  verb->callback([&exit_code, args] { exit_code = run_export(*args); });
}

}  // namespace tandem::tools
