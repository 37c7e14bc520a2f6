#pragma once
// Failpoints: named places where the fault-injection harness (tests/faults/matrix.sh) can stop a
// process at a chosen moment: mid-decode, before a backward, mid-checkpoint write, mid-weight sync,
// mid-HTTP request.
//
//   RLCPP_FAILPOINT=NAME[:HIT][@RANK]
//
// stops this process (SIGSTOP, sent to itself) the HIT-th time (1 when left out) it passes
// failpoint(NAME), in the process of MPI world rank RANK only when one is given. The harness sees the
// process stopped (its state in /proc), does what its case says (kill -9, fill the disk, leave it
// stopped past the timeouts) and continues it. The names in use: decode, backward, checkpoint, sync,
// http. Unset, a failpoint costs a load and a compare.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unistd.h>

namespace rlcpp {
namespace detail {

struct FailpointSpec {
  std::string name;  // empty: none armed
  long hit = 1;
  std::atomic<long> seen{0};

  FailpointSpec() {
    const char* spec = std::getenv("RLCPP_FAILPOINT");
    if (spec == nullptr || *spec == '\0') return;
    std::string s = spec;
    if (const auto at = s.find('@'); at != std::string::npos) {
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (rank == nullptr) rank = std::getenv("PMI_RANK");
      const bool mine = rank != nullptr && s.substr(at + 1) == rank;
      s.resize(at);
      if (!mine) return;
    }
    if (const auto colon = s.find(':'); colon != std::string::npos) {
      hit = std::max(1L, std::atol(s.c_str() + colon + 1));
      s.resize(colon);
    }
    name = s;
  }
};

inline FailpointSpec& failpoint_spec() {
  static FailpointSpec spec;
  return spec;
}

}  // namespace detail

inline void failpoint(std::string_view name) {
  auto& spec = detail::failpoint_spec();
  if (spec.name.empty() || name != spec.name) return;
  if (spec.seen.fetch_add(1) + 1 != spec.hit) return;
  std::fprintf(stderr, "failpoint %s:%ld reached: process %d stops itself (RLCPP_FAILPOINT)\n", spec.name.c_str(), spec.hit,
               static_cast<int>(getpid()));
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

}  // namespace rlcpp
