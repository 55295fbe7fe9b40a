// The doctor's pure parts: version encodings, which GPUs our kernels run on, and the verdict
// from hand-built probe results.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/doctor/doctor.h"

namespace tandem::backend {
namespace {

TEST(DoctorVersions, DecodesEachLibrarysEncoding) {
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(12040), "12.4");
  EXPECT_EQ(cudnn_version_text(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_text(8907), "8.9.7");
  EXPECT_EQ(triple_version_text(130100), "13.1.0");
  EXPECT_EQ(triple_version_text(22809), "2.28.9");
}

GpuReport gpu(int major, int minor) {
  GpuReport g;
  g.cc_major = major;
  g.cc_minor = minor;
  return g;
}

TEST(DoctorArchitectures, NativeSameMajorLaterMinor) {
  GpuReport g = gpu(8, 9);
  match_architectures(g, "75 80 86 90");
  EXPECT_TRUE(g.kernels_usable);
  EXPECT_EQ(g.kernels, "native (sm_86)");
}

TEST(DoctorArchitectures, NewerGpuRunsThroughPtx) {
  GpuReport g = gpu(10, 0);
  match_architectures(g, "75 80 86 90");
  EXPECT_TRUE(g.kernels_usable);
  EXPECT_EQ(g.kernels, "PTX JIT from compute_90 (slow first start)");
}

TEST(DoctorArchitectures, RealOnlyGivesNoPtxAndOlderGpusGetNothing) {
  GpuReport newer = gpu(10, 0);
  match_architectures(newer, "80-real 90-real");
  EXPECT_FALSE(newer.kernels_usable);
  GpuReport older = gpu(6, 1);
  match_architectures(older, "75 80");
  EXPECT_FALSE(older.kernels_usable);
  EXPECT_EQ(older.kernels, "none (built for 75 80)");
}

DoctorReport healthy() {
  DoctorReport r;
  for (LibraryReport* lib : {&r.driver, &r.cuda_runtime, &r.cudnn, &r.cublas, &r.nccl}) lib->found = true;
  r.driver.version = 13000;
  r.cuda_runtime.name = "cuda_runtime";
  r.cuda_runtime.version = 13000;
  r.cudnn.name = "cudnn";
  r.cudnn.version = 91900;
  r.cublas.name = "cublas";
  r.cublas.version = 130100;
  r.nccl.name = "nccl";
  r.nccl.version = 22809;
  GpuReport g = gpu(9, 0);
  g.kernels_usable = true;
  r.gpus = {g};
  return r;
}

TEST(DoctorDiagnosis, VerdictsAndExitCodes) {
  DoctorReport ok = healthy();
  diagnose(ok);
  if (!build_info::kCudaBuilt) {
    // A build without CUDA cannot use the healthy GPU, and says why.
    EXPECT_EQ(ok.verdict_line, "ready: cpu only (no GPU): this Tandem was built without CUDA");
    EXPECT_EQ(ok.exit_code(), 0);
    GTEST_SKIP() << "the remaining verdicts need a build against CUDA (CUDA_HOME set)";
  }
  EXPECT_EQ(ok.verdict_line, "ready: cuda (1 GPU)");
  EXPECT_EQ(ok.exit_code(), 0);

  DoctorReport no_driver = healthy();
  no_driver.driver.found = false;
  no_driver.driver.error = "libcuda.so.1: cannot open shared object file";
  no_driver.gpus.clear();
  diagnose(no_driver);
  EXPECT_EQ(no_driver.verdict, Verdict::kReadyCpuOnly);
  EXPECT_EQ(no_driver.exit_code(), 0);

  DoctorReport off_path = healthy();
  off_path.cudnn.on_loader_path = false;
  diagnose(off_path);
  EXPECT_EQ(off_path.verdict, Verdict::kReadyCuda);
  ASSERT_EQ(off_path.causes.size(), 1u);
  EXPECT_EQ(off_path.causes[0].severity, Severity::kWarning);
  EXPECT_NE(off_path.causes[0].fix.find("LD_LIBRARY_PATH"), std::string::npos);
}

TEST(DoctorDiagnosis, JsonEscapesErrors) {
  DoctorReport r = healthy();
  r.driver.found = false;
  r.driver.error = "bad \"quote\"\n";
  diagnose(r);
  std::string json = render_json(r);
  EXPECT_NE(json.find(R"("error":"bad \"quote\"\n")"), std::string::npos) << json;
  EXPECT_EQ(json.find('\n'), json.size() - 1) << "one line: " << json;
  nlohmann::json doc = nlohmann::json::parse(json);
  EXPECT_EQ(doc["driver"]["error"], r.driver.error);
  EXPECT_TRUE(doc["driver"]["version"].is_null());
  EXPECT_EQ(doc["exit_code"], r.exit_code());
  EXPECT_EQ(doc["verdict"], r.verdict_line);
}

// Names and paths come from drivers and the file system unchecked: bytes that are not UTF-8
// print as U+FFFD rather than making the doctor throw.
TEST(DoctorDiagnosis, JsonSurvivesBadUtf8) {
  DoctorReport r = healthy();
  r.gpus.at(0).name = "GPU \xff";
  diagnose(r);
  EXPECT_NE(render_json(r).find("\"name\":\"GPU \xef\xbf\xbd\""), std::string::npos) << render_json(r);
}

TEST(DoctorCpu, NamesTheExtensionsAndWhichPrecisionsAreFast) {
  const std::string epyc =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n"
      "flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni\n\nprocessor\t: 1\n";
  CpuReport cpu = parse_cpuinfo(epyc, 2);
  EXPECT_EQ(cpu.model, "AMD EPYC 9R14 96-Core Processor");
  EXPECT_TRUE(cpu.avx2 && cpu.avx512f && cpu.avx512_bf16);
  EXPECT_FALSE(cpu.amx_bf16);
  EXPECT_EQ(cpu.extensions(), "avx2, avx512f, avx512_bf16");
  EXPECT_EQ(cpu.fast_precisions(), "fp32; bf16 (avx512_bf16)");

  // AVX-512 without its bf16 instructions (Skylake-SP): bf16 runs, emulated, and is warned about.
  cpu = parse_cpuinfo("model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
                      "flags\t\t: avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl\n", 4);
  EXPECT_TRUE(cpu.runs_bf16());
  EXPECT_FALSE(cpu.fast_bf16());
  EXPECT_EQ(cpu.fast_precisions(), "fp32 (bf16 would run 3-4x slower than fp32: no avx512_bf16 or amx_bf16)");
  const std::string warning = cpu.bf16_warning();
  for (const char* part : {"Intel(R) Xeon(R) Gold 6148", "3-4x slower than fp32", "neither avx512_bf16 nor amx_bf16",
                           "set precision: fp32"}) {
    EXPECT_NE(warning.find(part), std::string::npos) << part << " in " << warning;
  }
  EXPECT_EQ(cpu.bf16_refusal(), "");
  // AVX2 only: oneDNN 2.6 has no bf16 kernels; the trainer refuses bf16 with these words.
  cpu = parse_cpuinfo("model name\t: Intel(R) Xeon(R) CPU E5-2680 v4\nflags\t\t: sse4_2 avx avx2 fma\n", 4);
  EXPECT_FALSE(cpu.runs_bf16());
  EXPECT_EQ(cpu.fast_precisions(),
            "fp32 (bf16 cannot run here: oneDNN's bf16 kernels need AVX-512: avx512f, bw, vl and dq)");
  EXPECT_EQ(cpu.bf16_warning(), "");
  const std::string refusal = cpu.bf16_refusal();
  for (const char* part :
       {"cannot run on this CPU (Intel(R) Xeon(R) CPU E5-2680 v4: avx2)", "avx512bw", "set precision: fp32"}) {
    EXPECT_NE(refusal.find(part), std::string::npos) << part << " in " << refusal;
  }
  EXPECT_EQ(parse_cpuinfo(epyc, 2).bf16_warning(), "");
  EXPECT_EQ(parse_cpuinfo(epyc, 2).bf16_refusal(), "");
  EXPECT_EQ(parse_cpuinfo("", 1).model, "unknown");

  DoctorReport report;
  report.cpu = parse_cpuinfo(epyc, 2);
  EXPECT_NE(render_text(report).find("CPU: AMD EPYC 9R14 96-Core Processor (2 cores): avx2, avx512f, avx512_bf16; "
                                     "fast precisions: fp32; bf16 (avx512_bf16)"),
            std::string::npos)
      << render_text(report);
  EXPECT_EQ(json_document(report)["cpu"]["fast_bf16"], true);
}

}  // namespace
}  // namespace tandem::backend
