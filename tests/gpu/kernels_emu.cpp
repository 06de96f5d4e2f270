// kernels_emu.cpp - device/cuda/kernels.cu compiled as host C++ on
// tests/gpu/cuda_emu.h (HKC_EMULATE), for test_cuda_kernels.
#include "tests/gpu/cuda_emu.h"

#include "device/cuda/kernels.cu"
