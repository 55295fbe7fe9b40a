// What oneDNN ran: its verbose log captured around a piece of code, and the questions the kernel
// choice tests ask of it.
#pragma once

#include <dnnl.hpp>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>

namespace tandem::backend::testing {

inline bool has_avx512_core() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512_core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512_core) == avx512_core;
}

// oneDNN's verbose lines for what f executes (level 1: executions only); empty where this oneDNN
// was built without its verbose log.
inline std::string onednn_log(const std::function<void()>& f) {
  if (dnnl::set_verbose(1) != dnnl::status::success) return {};
  ::testing::internal::CaptureStdout();
  f();
  std::fflush(stdout);
  std::string log = ::testing::internal::GetCapturedStdout();
  dnnl::set_verbose(0);
  return log;
}

// The first line of primitive kind `kind` ("convolution", "matmul") whose text also holds `part`
// (a propagation kind such as "forward_training", or "" for any); empty when there is none.
inline std::string primitive_line(const std::string& log, const std::string& kind, const std::string& part) {
  for (size_t at = 0; at < log.size();) {
    size_t end = log.find('\n', at);
    std::string line = log.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.find("," + kind + ",") != std::string::npos &&
        (part.empty() || line.find("," + part + ",") != std::string::npos)) {
      return line;
    }
    at = end == std::string::npos ? log.size() : end + 1;
  }
  return {};
}

}  // namespace tandem::backend::testing
