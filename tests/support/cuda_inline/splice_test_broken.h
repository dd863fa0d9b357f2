// A header with an error, for tests/test_cuda_inline.py: NVRTC's error names this file.
#pragma once
static __device__ __forceinline__ float splice_test_broken(float x) { return x * undefined_name; }
