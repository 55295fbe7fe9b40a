// Shadow of the CUDA runtime API header for the emulator build: the same as cuda_runtime.h here.
#pragma once

#include <cuda_runtime.h>
