#include "tools/trainer/run_config.h"

#include "engine/distribute/process_group.h"
#include "tools/trainer/prepare_data.h"

namespace tandem::tools {

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  RunConfig config;
  config.path = path;
  YAML::Node root = yaml::load_file(path);
  for (const auto& assignment : overrides) yaml::apply_override(root, assignment);
  TANDEM_CHECK(root.IsMap(), ErrorCode::kInvalidArgument, "config {}: expected a mapping of sections", path);
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

}  // namespace tandem::tools
