// A header for tests/test_cuda_inline.py (splice.cuda(..., include_dirs=...)).
#pragma once
static __device__ __forceinline__ float splice_test_triple(float x) { return 3.0f * x; }
