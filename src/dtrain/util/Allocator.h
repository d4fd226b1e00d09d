// glibc's allocator kept from handing freed memory back to the kernel between training steps.
#pragma once

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dtrain::util {

// Note [Keeping freed memory]
// A step allocates and frees the same blocks every time: activations, a weight's gradient from
// autograd before it is added into .grad, receive buffers. glibc serves blocks from 128 KiB up to a
// sliding threshold (at most 32 MiB) from its heap, and when a free leaves more than twice that
// threshold unused at the heap's top it returns the pages to the kernel; the next step's blocks then
// fault in again, page by page, and on a VM a first touch costs microseconds of wall time. So every
// dtrain process sets the mmap threshold to glibc's largest (32 MiB: larger blocks are mapped and
// unmapped on their own) and the trim threshold to 1 GiB. Setting either stops the sliding, which is
// why both are set: one alone leaves every block over 128 KiB a mapping of its own, faulted in at
// every use. What still faults is the heap's own growth, where a freed block's hole does not fit the
// next one. The cost is memory: the resident set stays at its peak instead of shrinking after it,
// and the peak itself rises (blocks below 32 MiB share the heap from the first step, and its holes
// stay). PyTorch's CUDA caching allocator makes the same trade for device memory.
// bench/zero_memory measures the strategies' memory without it.
// Measured (2-vCPU VM, gpipe S = 2, M = 8, mpi): 35,000-58,000 faults in 8 steps -> 0-8,192.
// Left alone where the environment configures glibc's allocator itself (MALLOC_*_ variables or a
// glibc.malloc tunable) or DTRAIN_MALLOC_DEFAULTS=1 asks for glibc's defaults. Returns whether it set
// them.
inline bool keep_freed_memory() {
#if defined(__GLIBC__)
  if (const char* v = std::getenv("DTRAIN_MALLOC_DEFAULTS"); v != nullptr && std::strcmp(v, "1") == 0)
    return false;
  for (const char* name :
       {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}) {
    if (std::getenv(name) != nullptr) return false;
  }
  if (const char* t = std::getenv("GLIBC_TUNABLES");
      t != nullptr && std::strstr(t, "glibc.malloc.") != nullptr) {
    return false;
  }
  constexpr int kMmapThreshold = 32 << 20;  // glibc refuses more on 64-bit (HEAP_MAX_SIZE / 2)
  constexpr int kTrimThreshold = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return false;
#endif
}

// Hands what the heap holds freed back to the kernel, once: after a model is built and cut
// (Note [Deferred initialisation] in models/Network.h builds every stage whole in turn; a strategy
// copies what it keeps into flat buffers), whose freed blocks no step reuses at their sizes.
// Without it keep_freed_memory()'s trim threshold would keep up to 1 GiB of them resident for the
// whole run.
inline void return_freed_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace dtrain::util
