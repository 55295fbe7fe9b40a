// tandem_doctor_probe [--json] [--device cuda|cpu|auto]: runs the doctor once in its own process
// (searching TANDEM_DOCTOR_LIB_DIRS when set) and exits with its exit code, so each test probes
// a fresh process whose loader has not yet seen any CUDA library.
#include <cstdio>
#include <string>

#include "engine/backend/doctor/doctor.h"

int main(int argc, char** argv) {
  tandem::backend::DoctorOptions options;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json") json = true;
    if (arg == "--device" && i + 1 < argc) options.required_device = argv[++i];
  }
  tandem::backend::DoctorReport report = tandem::backend::run_doctor(options);
  std::string text = json ? render_json(report) : render_text(report);
  std::fputs(text.c_str(), stdout);
  return report.exit_code();
}
