#include "tests/support/onnxruntime.h"

#include <cstdlib>
#include <cstring>
#include <regex>
#include <stdexcept>

#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace tandem::testing {
namespace {

const std::filesystem::path kRunner = std::filesystem::path(TANDEM_SOURCE_DIR) / "tools/scripts/onnx_run.js";

std::filesystem::path ort_package() {
  if (const char* env = std::getenv("TANDEM_ONNXRUNTIME_NODE")) return env;
  return std::filesystem::path(TANDEM_SOURCE_DIR) / ".deps/node_modules/onnxruntime-node";
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

std::string onnxruntime_skip_reason() {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    return "node is not installed: the ONNX checks run exported models under npm's onnxruntime-node (run "
           "tools/scripts/install_onnxruntime.sh)";
  }
  if (!std::filesystem::exists(ort_package() / "package.json")) {
    return "onnxruntime-node is not installed at " + ort_package().string() +
           " (run tools/scripts/install_onnxruntime.sh, as tools/scripts/test.sh does)";
  }
  return {};
}

OnnxRuntimeOutput run_onnxruntime(const std::filesystem::path& model, const std::string& input_name,
                                  const Tensor& input, const std::string& output_name) {
  TempDir dir;
  const Tensor host = input.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  write_file(dir.path() / "input.bin", std::string_view(static_cast<const char*>(host.raw_data()), host.nbytes()));
  std::string dims;
  for (int64_t d : host.shape().dims()) dims += (dims.empty() ? "" : "x") + std::to_string(d);
  const std::string dtype = host.dtype() == DType::kI64 ? "int64" : "float32";
  const std::string command = "node " + quoted(kRunner.string()) + " " + quoted(model.string()) + " " +
                              quoted(input_name + "=" + dtype + ":" + dims + ":" + (dir.path() / "input.bin").string()) +
                              " --output-dir " + quoted(dir.path().string()) + " > " +
                              quoted((dir.path() / "out.json").string()) + " 2> " +
                              quoted((dir.path() / "err.txt").string());
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("onnxruntime failed on " + model.string() + ": " + read_file(dir.path() / "err.txt"));
  }
  const std::string json = read_file(dir.path() / "out.json");
  std::smatch m;
  const std::regex dims_of("\"" + output_name + "\":\\{\"dims\":\\[([0-9,]*)\\]");
  if (!std::regex_search(json, m, dims_of)) throw std::runtime_error("no output '" + output_name + "' in " + json);
  OnnxRuntimeOutput out;
  const std::string list = m[1].str();
  for (size_t at = 0; at < list.size();) {
    size_t comma = list.find(',', at);
    out.dims.push_back(std::stoll(list.substr(at, comma - at)));
    at = comma == std::string::npos ? list.size() : comma + 1;
  }
  const std::string bytes = read_file(dir.path() / (output_name + ".bin"));
  out.values.resize(bytes.size() / sizeof(float));
  std::memcpy(out.values.data(), bytes.data(), out.values.size() * sizeof(float));
  return out;
}

}  // namespace tandem::testing
