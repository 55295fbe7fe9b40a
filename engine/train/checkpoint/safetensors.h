// safetensors files (Hugging Face's format, which PyTorch's safetensors.torch reads): an 8-byte
// little-endian header length N, N bytes of JSON header padded with spaces to 8 bytes, then the
// raw little-endian data of each tensor in logical (row-major, NCHW) order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/tensor.h"

namespace tandem::train {

using TensorMap = std::map<std::string, Tensor>;
using SafetensorsMetadata = std::map<std::string, std::string>;

// The safetensors dtype name: "F32", "BF16", "F16", "I32", "I64", "U8".
std::string_view safetensors_dtype_name(DType dtype);

// One tensor's entry in the header; begin and end are offsets into the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order
  SafetensorsMetadata metadata;           // the "__metadata__" object, if any
  uint64_t data_start = 0;                // 8 + N: where the data section begins in the file
  uint64_t file_size = 0;
};

struct SafetensorsFile {
  TensorMap tensors;  // CPU, contiguous
  SafetensorsMetadata metadata;
};

// Writes tensors from any device and in any memory format, as safetensors' own writer orders them
// (by dtype alignment, largest first, then by name, so each tensor is aligned to its element
// size), then fsyncs and closes the file. Throws with errno text on any failed call.
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const SafetensorsMetadata& metadata = {});

// Reads and validates the header against the file's size without reading tensor data: header
// length, JSON, dtypes, shapes, offsets in bounds, non-overlapping and covering the data exactly.
// A file that breaks any rule is DataLoss naming the file, the tensor and the rule.
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// read_safetensors_header, then every tensor's data into CPU memory.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

}  // namespace tandem::train
