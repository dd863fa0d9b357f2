// splice_group.h: the group of a warpgroup-scope call (scope="warpgroup").
//
// Every thread of the group calls the extern once, convergently. The group is one
// warpgroup of 128 threads: in a warp-specialised kernel the warpgroup tileiras runs the
// call site on (its consumer warpgroup, or the epilogue warpgroup it splits off when the
// epilogue reduces the accumulator), the whole (128-thread) block otherwise. threadIdx and blockDim describe the block, not
// the group, so splice refuses them in a warpgroup-scope extern; use these instead.
#pragma once

// The number of threads in the group (128).
static __device__ __forceinline__ unsigned splice_group_size() { return 128u; }

// This thread's rank in the group, 0 .. splice_group_size() - 1. The group's threads are
// an aligned warpgroup of the block, so the rank is threadIdx.x mod 128.
static __device__ __forceinline__ unsigned splice_group_rank() {
    unsigned r;
    asm volatile("{\n\t.reg .u32 %%splice_group_tid;\n\t"
                 "mov.u32 %%splice_group_tid, %%tid.x;\n\t"
                 "and.b32 %0, %%splice_group_tid, 127;\n\t}" : "=r"(r));
    return r;
}

// A barrier over the group, with the memory ordering of __syncthreads() among its threads
// (named barrier 15 with 128 threads: splice proves the kernel uses that id nowhere else).
// Every thread of the group must reach it, as for __syncthreads(); it is the non-aligned
// barrier, so the threads of a warp need not be converged there.
static __device__ __forceinline__ void splice_group_sync() {
    asm volatile("barrier.sync 15, 128;" ::: "memory");
}
