// Intra-op thread count for LibTorch: an explicit request, else $OMP_NUM_THREADS, else LibTorch's
// own default. On Debian's CPU LibTorch that default is 1 intra-op thread while OpenBLAS threads
// every matmul over all cores, and that split measured fastest (bench/forward, 2 cores, 6 layers:
// forward 315 tokens/s at 1 thread vs 244 at 2, since two thread pools then fight over two cores).
#pragma once

namespace rlcpp {

// Sets LibTorch's intra-op threads when asked to and returns the count in effect. `requested` <= 0: automatic.
int configure_threads(int requested = 0);

}  // namespace rlcpp
