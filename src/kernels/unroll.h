// RLCPP_UNROLL before a loop: unrolled whole. The kernels' register tiles need it: GCC keeps an
// array of vectors in registers only when every loop over it is unrolled.
#pragma once

#if defined(__clang__)
#define RLCPP_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define RLCPP_UNROLL _Pragma("GCC unroll 32")
#else
#define RLCPP_UNROLL
#endif
