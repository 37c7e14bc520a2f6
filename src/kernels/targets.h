// The SIMD targets the kernels are compiled for: included first by each kernel file, before
// Highway's foreach_target.h. SVE's vectors have no compile-time size, so they cannot live in the
// kernels' register arrays (the matmul tile's accumulators); Arm runs NEON.
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
