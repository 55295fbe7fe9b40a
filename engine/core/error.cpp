#include "engine/core/error.h"

namespace tandem {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kOutOfRange: return "OutOfRange";
    case ErrorCode::kDataLoss: return "DataLoss";
    case ErrorCode::kUnimplemented: return "Unimplemented";
    case ErrorCode::kFailedPrecondition: return "FailedPrecondition";
    case ErrorCode::kResourceExhausted: return "ResourceExhausted";
    case ErrorCode::kUnavailable: return "Unavailable";
    case ErrorCode::kDeadlineExceeded: return "DeadlineExceeded";
    case ErrorCode::kAborted: return "Aborted";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

}  // namespace tandem
