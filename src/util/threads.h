// Process-wide compute settings for LibTorch on the CPU: its intra-op threads, and a cache of the
// large blocks its tensors are allocated in.
//
// Intra-op threads: an explicit request, else $OMP_NUM_THREADS, else LibTorch's own default (the
// torch wheel's: one OpenMP thread per physical core, which its BLAS, MKL, computes products on).
// The fused element-wise kernels (model/kernel_linear.h) run on the kernels' own pool over every core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rlcpp {

// Called first thing in main, before any library reads its settings: may replace the process
// (execv of itself) with a setting that only takes effect when a library loads, kept where the user
// gave it: OMP_WAIT_POLICY=PASSIVE where this machine's MPI ranks run more threads than it has
// cores (OpenMP threads spinning while they wait take the cores the other ranks compute on).
void prepare_process(char** argv);

// Sets LibTorch's intra-op threads when asked to and returns the count in effect. `requested` <= 0:
// automatic. Also installs the block cache below (once).
int configure_threads(int requested = 0);

// LibTorch's CPU allocator returns every large block to the kernel when a tensor dies (glibc maps
// blocks above 32 MiB afresh, and trims its heap), so each step of a forward+backward pays page
// faults and the kernel's zeroing for gigabytes of activations and gradients again (a fifth of a
// 0.5B-model forward+backward here). This cache keeps freed blocks of at least 1 MiB for the next
// tensor that fits one (at most an eighth smaller, so little is wasted), or else takes the head of
// a larger unused block (its tail stays unused), and merges a freed block with unused neighbours;
// so a batch a few tokens longer than the last finds memory already mapped (page zeroing fell from
// 11% to 3% of a 0.5B GRPO train phase: bench/train_profile.sh). When no block is large enough, the
// blocks unused longest go back to the kernel until the unused ones are within a quarter of the most
// bytes ever live, so peak memory stays close to what the program itself needs (measured at 0.5B:
// a forward+backward's peak RSS fell, 8.3 -> 7.3 GiB; a GRPO step's rose 7 %). $RLCPP_CPU_BLOCK_CACHE_MB (default 4096) caps
// the unused bytes; 0 turns the cache off. Blocks are mapped with transparent huge pages where the
// kernel allows them.
void install_cpu_block_cache();

// Bytes the cache holds unused now (for tests and benchmarks).
std::size_t cpu_block_cache_bytes();

// While one is alive on a thread, the tensor buffers that thread allocates below 1 MiB come from
// the cache as well: freed ones are kept by exact size for the same tensor of the next step. The
// generation engine's steps run in one, so that in steady state (the same shapes step after step)
// every buffer a step needs is one an earlier step freed: a decode step allocates no memory.
class StepBufferScope {
 public:
  StepBufferScope();
  ~StepBufferScope();
  StepBufferScope(const StepBufferScope&) = delete;
  StepBufferScope& operator=(const StepBufferScope&) = delete;
};

// Tensor buffers allocated on the CPU since the cache was installed, and of them the fresh ones:
// those the cache could not serve (new memory from glibc or the kernel). Both stay 0 while the
// cache is off.
struct CpuAllocationCounts {
  int64_t allocations = 0, fresh = 0;
};
CpuAllocationCounts cpu_allocation_counts();

// The process's minor page faults so far (getrusage): memory touched for the first time.
int64_t minor_page_faults();

// What a command needs of the process's limits, checked at its start rather than failing half-way:
// `files` descriptors open at once (RLIMIT_NOFILE) and `threads` (RLIMIT_NPROC, which counts the
// user's threads). A soft limit below the need is raised toward the hard one (as Go's runtime and
// nginx do); a hard limit below it is a UserError naming the `ulimit` to raise and `what` needs it.
struct ProcessLimits {
  int64_t files = 0, threads = 0;  // after ensure_process_limits: the soft limits in effect (-1: none)
};
ProcessLimits ensure_process_limits(int64_t files, int64_t threads, const std::string& what);

}  // namespace rlcpp
