// The "config" part of `trainer doctor --config`, as text after the usual report and as a
// "config" object in the --json document (the doctor's keys keep their order).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tools/trainer/doctor_config.h"

namespace tandem::tools {
namespace {

std::string_view severity_name(backend::Severity s) {
  switch (s) {
    case backend::Severity::kNoGpu: return "no_gpu";
    case backend::Severity::kError: return "error";
    case backend::Severity::kWarning: return "warning";
  }
  return "error";
}

std::string storage_line(const StorageInfo& s) {
  std::string kind = s.network ? "network file system" : !s.rotational ? "rotational: unknown"
                                                       : *s.rotational ? "rotational disk" : "not rotational";
  return fmt::format("{} ({})", kind, s.detail);
}

}  // namespace

std::string render_config_text(const ConfigCheck& c) {
  std::string out = fmt::format("\nconfig: {}\n", c.path);
  if (c.processes.ok) {
    out += "  processes: " + c.processes.spec.describe();
    if (c.processes.spec.multi_process()) {
      out += fmt::format(" (this host reaches it from {}); Gloo: {}", c.processes.route,
                         c.processes.gloo ? "in this build" : "missing");
    }
    out += "\n";
  }
  out += fmt::format("  device: {}, devices: {}\n", c.plan.device, c.plan.devices);
  if (c.plan.ok) {
    out += "  run: " + c.plan.plan.describe() + "\n";
  } else {
    out += "  run: cannot start (see causes)\n";
  }
  uint64_t total = 0;
  for (const auto& f : c.files) total += f.bytes;
  out += fmt::format("  data.files: {} -> {} file{}, {:.1f} MB\n", fmt::join(c.patterns, ", "), c.files.size(),
                     c.files.size() == 1 ? "" : "s", static_cast<double>(total) / 1e6);
  for (const auto& s : c.storage) out += "  storage: " + storage_line(s) + "\n";
  if (!c.causes.empty()) out += "  causes:\n";
  for (const auto& cause : c.causes) {
    out += fmt::format("    [{}] {}\n        fix: {}\n", severity_name(cause.severity), cause.summary, cause.fix);
  }
  return out;
}

std::string render_json_with_config(const backend::DoctorReport& report, const ConfigCheck& c) {
  nlohmann::ordered_json doc = backend::json_document(report);
  nlohmann::ordered_json config{{"path", c.path}, {"device", c.plan.device}, {"devices", c.plan.devices},
                                {"ok", c.plan.ok && c.processes.ok}};
  const auto& spec = c.processes.spec;
  config["processes"] = {{"ok", c.processes.ok}, {"rank", spec.rank}, {"size", spec.size}, {"source", spec.source},
                         {"address", spec.address}, {"port", spec.port}, {"route", c.processes.route},
                         {"gloo", c.processes.gloo}};
  if (c.plan.ok) {
    const auto& p = c.plan.plan;
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const auto& d : p.devices) devices.push_back(d.str());
    config["replicas"] = p.replicas();
    config["replica_devices"] = devices;
    config["per_replica_batch_size"] = p.per_replica_batch_size;
    config["global_batch_size"] = p.global_batch_size;
  }
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& f : c.files) files.push_back({{"path", f.path}, {"bytes", f.bytes}});
  config["data_files"] = {{"patterns", c.patterns}, {"files", files}};
  nlohmann::ordered_json storage = nlohmann::ordered_json::array();
  for (const auto& s : c.storage) {
    storage.push_back({{"filesystem", s.filesystem}, {"network", s.network},
                       {"rotational", s.rotational ? nlohmann::ordered_json(*s.rotational) : nullptr},
                       {"detail", s.detail}});
  }
  config["storage"] = storage;
  nlohmann::ordered_json causes = nlohmann::ordered_json::array();
  for (const auto& cause : c.causes) {
    causes.push_back({{"severity", severity_name(cause.severity)}, {"summary", cause.summary}, {"fix", cause.fix}});
  }
  config["causes"] = causes;
  doc["config"] = config;
  return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";  // as render_json
}

}  // namespace tandem::tools
