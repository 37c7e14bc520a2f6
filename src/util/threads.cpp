#include "util/threads.h"

#include <ATen/Parallel.h>

#include <cstdlib>

namespace rlcpp {

int configure_threads(int requested) {
  int n = requested;
  if (n <= 0) {
    if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr) n = std::atoi(env);
  }
  if (n > 0) at::set_num_threads(n);
  return at::get_num_threads();
}

}  // namespace rlcpp
