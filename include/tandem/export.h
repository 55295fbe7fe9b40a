// ONNX export: export_onnx(model, input_spec, path) writes a module's eval-mode forward as an ONNX
// file, checked by ONNX's own checker (docs/EXPORT.md).
#pragma once

#include "engine/export/onnx_export.h"
