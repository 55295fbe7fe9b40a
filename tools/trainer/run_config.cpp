#include "tools/trainer/run_config.h"

#include "engine/distribute/process_group.h"
#include "tools/trainer/prepare_data.h"

namespace tandem::tools {
namespace {

// Token windows and the model that reads them must agree before any data is prepared or read: a
// token the embedding has no row for, or a window longer than the position table, would otherwise
// stop the run only at its first batch.
void check_tokens_fit_model(const data::PipelineConfig& d, const train::ModelConfig& m, const std::string& section) {
  if (!d.tokens) {
    TANDEM_CHECK(m.name != "gpt", ErrorCode::kInvalidArgument,
                 "model gpt reads token windows: give {} a tokens: section (docs/TRANSFORMERS.md, \"Text data\")",
                 section);
    return;
  }
  TANDEM_CHECK(m.name == "gpt", ErrorCode::kInvalidArgument,
               "{}.tokens gives token windows, which model '{}' does not read; use model.name: gpt, or image: data",
               section, m.name);
  TANDEM_CHECK(d.tokens->vocab_size <= m.vocab_size, ErrorCode::kInvalidArgument,
               "{}.tokens.vocab_size {} is larger than model.vocab_size {}: the model has no embedding for tokens "
               "from {} on; set model.vocab_size to at least {}",
               section, d.tokens->vocab_size, m.vocab_size, m.vocab_size, d.tokens->vocab_size);
  TANDEM_CHECK(d.tokens->length - 1 <= m.block_size, ErrorCode::kInvalidArgument,
               "{}.tokens.length {} predicts {} tokens per window, more than model.block_size {}; set block_size to "
               "at least {} or make shorter windows",
               section, d.tokens->length, d.tokens->length - 1, m.block_size, d.tokens->length - 1);
}

// The strict walk of a whole config document; path names its source in every error.
RunConfig parse_run_config(YAML::Node root, const std::string& path, const std::vector<std::string>& overrides) {
  RunConfig config;
  config.path = path;
  // Checked before any --set, which would otherwise index into a scalar or a list.
  if (root.IsNull() && !overrides.empty()) root = YAML::Node(YAML::NodeType::Map);
  TANDEM_CHECK(root.IsMap(), ErrorCode::kInvalidArgument,
               "config {}: expected a mapping of sections (data:, train:, model:, ...), but the file holds {}", path,
               root.IsScalar() ? "a single value ('" + root.Scalar().substr(0, 40) + "')"
               : root.IsSequence() ? std::string("a list")
                                   : std::string("nothing"));
  for (const auto& assignment : overrides) yaml::apply_override(root, assignment);
  yaml::Keys keys;
  train::add_train_keys(config.train, keys);
  add_prepare_keys(config.train.prepare, keys);  // the sources tools/ can prepare, text ones included
  bool has_data = false;
  keys["data"] = [&](const YAML::Node& n, const std::string& p) {
    config.data = data::parse_pipeline_section(n, p);
    has_data = true;
  };
  keys["eval_data"] = [&](const YAML::Node& n, const std::string& p) {
    config.eval_data = data::parse_pipeline_section(n, p);
  };
  try {
    yaml::walk(root, "", keys);
    TANDEM_CHECK(has_data, ErrorCode::kInvalidArgument, "no data section: name the training TFRecords in data.files");
    train::validate(config.train);
    check_tokens_fit_model(config.data, config.train.model, "data");
    if (config.eval_data) check_tokens_fit_model(*config.eval_data, config.train.model, "eval_data");
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("config {}: {}", path, e.what()));
  }
  const YAML::Node& read = root;  // const: looking a key up does not add it
  const bool has_distribute = read["distribute"] && read["distribute"].IsMap();
  if (has_distribute && read["distribute"]["token"]) root["distribute"]["token"] = "(hidden)";  // never in files or logs
  YAML::Node shared = YAML::Clone(root);
  if (has_distribute) {
    shared["distribute"].remove("process_rank");
    shared["distribute"].remove("token");
  }
  YAML::Emitter shared_out;
  shared_out << shared;
  config.shared_digest = distribute::config_digest(shared_out.c_str());
  YAML::Emitter out;
  out << root;
  config.resolved_yaml = out.c_str();
  return config;
}

}  // namespace

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_run_config(yaml::load_file(path), path, overrides);
}

RunConfig run_config_from_text(const std::string& text, const std::string& source) {
  return parse_run_config(yaml::load(text, source), source, {});
}

}  // namespace tandem::tools
