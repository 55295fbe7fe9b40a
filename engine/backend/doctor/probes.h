// The probes behind run_doctor: each opens one library as the search policy says, reads its
// version through dlsym'ed entry points, and never throws.
#pragma once

#include "engine/backend/doctor/doctor.h"
#include "engine/backend/doctor/library_search.h"

namespace tandem::backend::doctor_detail {

LibraryReport probe_cuda_runtime(const SearchPolicy& policy);
LibraryReport probe_cudnn(const SearchPolicy& policy);
LibraryReport probe_cublas(const SearchPolicy& policy);
LibraryReport probe_nccl(const SearchPolicy& policy);
// The driver, cuInit and the GPUs it shows: fills report.driver, init_error and gpus.
void probe_driver(const SearchPolicy& policy, DoctorReport& report);

// Copies what find_library found into the report; false when nothing loaded.
bool fill_found(LibraryReport& report, Found& found);

}  // namespace tandem::backend::doctor_detail
