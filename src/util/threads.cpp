#include "util/threads.h"

#include <fmt/format.h>

#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <dlfcn.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "util/error.h"

namespace rlcpp {

namespace {

thread_local int step_scopes = 0;
std::atomic<int64_t> allocations{0}, fresh_allocations{0};

class BlockCache final : public c10::Allocator {
 public:
  BlockCache(c10::Allocator* small, std::size_t limit) : small_(small), limit_(limit) {}

  c10::DataPtr allocate(std::size_t n) override {
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (n < kMinBlock) {
      if (step_scopes > 0) return allocate_small(n);
      fresh_allocations.fetch_add(1, std::memory_order_relaxed);
      return small_->allocate(n);
    }
    std::size_t size = page_rounded(n);
    std::vector<std::pair<void*, std::size_t>> evicted;
    void* p = take(&size, &evicted);
    for (auto [q, bytes] : evicted) ::munmap(q, bytes);
    if (p == nullptr) {
      fresh_allocations.fetch_add(1, std::memory_order_relaxed);
      p = map(size);
    }
    return {p, new Block{p, size, this}, &release, c10::Device(c10::DeviceType::CPU)};
  }

  // Tensors copied on the CPU (clone, to) copy their bytes as any CPU tensor's.
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  std::size_t cached() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_ + small_cached_;
  }

 private:
  static constexpr std::size_t kMinBlock = std::size_t{1} << 20;

  struct Block {
    void* p;
    std::size_t size;
    BlockCache* cache;
  };
  struct Unused {
    void* p;
    std::size_t size;
  };
  using Lru = std::list<Unused>;  // unused blocks, the longest unused first

  static std::size_t page_rounded(std::size_t n) { return (n + 4095) / 4096 * 4096; }

  static void* map(std::size_t size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    ::madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
  }

  // The smallest unused block of at least *size bytes and at most an eighth more (*size becomes
  // its size); else the head of the smallest larger one, its tail staying unused (a tensor a
  // little larger than the one freed last step, a batch some tokens longer, takes memory already
  // mapped rather than new pages the kernel must zero, a tenth of a 0.5B train phase). Else
  // nullptr, and the caller maps a new block after unmapping `evicted`: the longest unused
  // blocks, until what stays unused is within a quarter of the most ever live, so the cache holds
  // at most that above the program's own peak.
  void* take(std::size_t* size, std::vector<std::pair<void*, std::size_t>>* evicted) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_size_.lower_bound(*size);
    if (it != by_size_.end()) {
      const Unused block = remove_unused(it->second);
      if (block.size > *size + *size / 8) {
        add_unused(static_cast<char*>(block.p) + *size, block.size - *size);
      } else {
        *size = block.size;
      }
      add_live(*size);
      return block.p;
    }
    add_live(*size);
    while (!lru_.empty() && cached_ > peak_live_ / 4) {
      const Unused oldest = remove_unused(lru_.begin());
      evicted->emplace_back(oldest.p, oldest.size);
    }
    return nullptr;
  }

  // An unused block into the lists (the most recently used), and out of them.
  void add_unused(void* p, std::size_t size) {
    lru_.push_back({p, size});
    by_size_.emplace(size, std::prev(lru_.end()));
    by_address_.emplace(static_cast<char*>(p), std::prev(lru_.end()));
    cached_ += size;
  }
  Unused remove_unused(Lru::iterator at) {
    const Unused block = *at;
    for (auto e = by_size_.lower_bound(block.size); e != by_size_.end(); ++e) {
      if (e->second == at) {
        by_size_.erase(e);
        break;
      }
    }
    by_address_.erase(static_cast<char*>(block.p));
    lru_.erase(at);
    cached_ -= block.size;
    return block;
  }

  void add_live(std::size_t size) {
    live_ += size;
    peak_live_ = std::max(peak_live_, live_);
  }

  static void release(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    block->cache->keep(block->p, block->size);
    delete block;
  }

  // A freed block joins the unused ones, merged with an unused neighbour on either side (a tail
  // carved off, or a mapping the kernel placed beside it): a later, larger tensor finds it whole.
  void keep(void* p, std::size_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_ -= size;
      auto after = by_address_.find(static_cast<char*>(p) + size);
      if (after != by_address_.end()) size += remove_unused(after->second).size;
      auto before = by_address_.lower_bound(static_cast<char*>(p));
      if (before != by_address_.begin()) {
        --before;
        if (before->first + before->second->size == static_cast<char*>(p)) {
          const Unused left = remove_unused(before->second);
          p = left.p;
          size += left.size;
        }
      }
      if (cached_ + size <= limit_) {
        add_unused(p, size);
        return;
      }
    }
    ::munmap(p, size);
  }

  // Small blocks of a StepBufferScope: kept by exact size (in 64-byte units) for the same tensor of
  // the next step, with their size and owner in a header before the data, so that taking and
  // returning one allocates nothing. At most kSmallLimit bytes (and no more than the cache's own
  // limit, $RLCPP_CPU_BLOCK_CACHE_MB) stay unused; beyond, freed.
  static constexpr std::size_t kHeader = 64, kSmallLimit = std::size_t{256} << 20;
  struct SmallHeader {
    std::size_t size;
    BlockCache* cache;
  };

  c10::DataPtr allocate_small(std::size_t n) {
    const std::size_t size = std::max<std::size_t>((n + 63) / 64 * 64, 64);
    void* base = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = small_unused_.find(size);
      if (it != small_unused_.end() && !it->second.empty()) {
        base = it->second.back();
        it->second.pop_back();
        small_cached_ -= size;
      }
    }
    if (base == nullptr) {
      fresh_allocations.fetch_add(1, std::memory_order_relaxed);
      base = std::aligned_alloc(64, size + kHeader);
      if (base == nullptr) throw std::bad_alloc();
      *static_cast<SmallHeader*>(base) = {size, this};
    }
    void* data = static_cast<char*>(base) + kHeader;
    return {data, base, &release_small, c10::Device(c10::DeviceType::CPU)};
  }

  static void release_small(void* base) {
    const SmallHeader header = *static_cast<SmallHeader*>(base);
    {
      std::lock_guard<std::mutex> lock(header.cache->mutex_);
      if (header.cache->small_cached_ + header.size <= std::min(kSmallLimit, header.cache->limit_)) {
        header.cache->small_unused_[header.size].push_back(base);
        header.cache->small_cached_ += header.size;
        return;
      }
    }
    std::free(base);
  }

  c10::Allocator* small_;
  std::size_t limit_;
  std::unordered_map<std::size_t, std::vector<void*>> small_unused_;
  std::size_t small_cached_ = 0;
  mutable std::mutex mutex_;
  Lru lru_;
  std::multimap<std::size_t, Lru::iterator> by_size_;  // the same blocks by size
  std::map<char*, Lru::iterator> by_address_;          // and by address
  std::size_t cached_ = 0, live_ = 0, peak_live_ = 0;
};

BlockCache* installed = nullptr;

}  // namespace

void install_cpu_block_cache() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::size_t mib = 4096;
    if (const char* env = std::getenv("RLCPP_CPU_BLOCK_CACHE_MB"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const unsigned long long value = std::strtoull(env, &end, 10);
      if (*end == '\0' && env[0] != '-') {
        mib = static_cast<std::size_t>(value);
      } else {  // before logging and argument parsing: a plain line, and the default
        std::fprintf(stderr, "warning: RLCPP_CPU_BLOCK_CACHE_MB=%s is not a whole number of MiB; using %zu "
                             "(set 0 to turn the cache off)\n", env, mib);
      }
    }
    if (mib == 0) return;
    // Never destroyed: tensors may outlive every other static.
    installed = new BlockCache(c10::GetCPUAllocator(), mib << 20);
    c10::SetCPUAllocator(installed, /*priority=*/1);
  });
}

std::size_t cpu_block_cache_bytes() { return installed != nullptr ? installed->cached() : 0; }

StepBufferScope::StepBufferScope() { ++step_scopes; }
StepBufferScope::~StepBufferScope() { --step_scopes; }

CpuAllocationCounts cpu_allocation_counts() {
  return {allocations.load(std::memory_order_relaxed), fresh_allocations.load(std::memory_order_relaxed)};
}

namespace {

// A positive count from the environment variable `name`, or 0.
int env_count(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::max(0, std::atoi(value)) : 0;
}

// OpenMP's wait policy: PASSIVE (waiting threads sleep) where the MPI ranks on this machine run more
// threads than it has cores, so that one rank's idle threads do not spin on the cores the others
// compute on (RLCPP_OMP_WAIT_CHOSEN saying why). Whether it set it.
bool set_omp_wait_policy() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return false;  // the user's, or ours after the restart
  const int ranks = std::max(env_count("OMPI_COMM_WORLD_LOCAL_SIZE"), env_count("MPI_LOCALNRANKS"));  // Open MPI, Hydra
  if (ranks < 2) return false;
  cpu_set_t allowed;  // the cores this rank may run on (a container's or the launcher's binding)
  CPU_ZERO(&allowed);
  const int cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed)
                                                                         : static_cast<int>(std::thread::hardware_concurrency());
  const int threads = at::get_num_threads();  // LibTorch's intra-op threads (OMP_NUM_THREADS, else its default)
  if (cores <= 0 || threads < 2 || ranks * threads <= cores) return false;  // one thread a rank: none waits
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  setenv("RLCPP_OMP_WAIT_CHOSEN", fmt::format("{} ranks x {} threads on {} cores", ranks, threads, cores).c_str(), 1);
  return true;
}

}  // namespace

void prepare_process(char** argv) {
  if (!set_omp_wait_policy()) return;
  execv("/proc/self/exe", argv);
  // The execv failed: go on as things are, saying so (rlcpp info --system shows it too).
  std::fprintf(stderr, "warning: this machine's MPI ranks run more threads than it has cores (%s) and rlcpp could "
                       "not restart with OMP_WAIT_POLICY=PASSIVE; set it yourself (mpirun -x OMP_WAIT_POLICY=PASSIVE)\n",
               std::getenv("RLCPP_OMP_WAIT_CHOSEN"));
  unsetenv("OMP_WAIT_POLICY");
  unsetenv("RLCPP_OMP_WAIT_CHOSEN");
}

int configure_threads(int requested) {
  install_cpu_block_cache();
  int n = requested;
  if (n <= 0) {
    if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr) n = std::atoi(env);
  }
  if (n > 0) at::set_num_threads(n);
  return at::get_num_threads();
}

int64_t minor_page_faults() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_minflt);
}

ProcessLimits ensure_process_limits(int64_t files, int64_t threads, const std::string& what) {
  ProcessLimits now;
  // One limit: raised to the need (or the hard limit's "unlimited") when the soft one is lower.
  auto ensure = [&](int resource, int64_t need, const char* flag, const char* unit) -> int64_t {
    rlimit limit{};
    if (::getrlimit(resource, &limit) != 0) return -1;
    auto value = [](rlim_t v) { return v == RLIM_INFINITY ? int64_t{-1} : static_cast<int64_t>(v); };
    const auto enough = [need](rlim_t v) { return v == RLIM_INFINITY || static_cast<int64_t>(v) >= need; };
    if (enough(limit.rlim_cur)) return value(limit.rlim_cur);
    if (!enough(limit.rlim_max)) {
      throw_user_error("{} needs about {} {} at once, but this process may have at most {} (the hard limit, `ulimit -H{}`): "
                       "raise it (`ulimit -{} {}` as root, or /etc/security/limits.conf), or ask for less",
                       what, need, unit, value(limit.rlim_max), flag, flag, need);
    }
    limit.rlim_cur = static_cast<rlim_t>(need);
    if (::setrlimit(resource, &limit) != 0) {
      throw_user_error("{} needs about {} {} at once; this process may have {} (`ulimit -{}`) and could not raise it",
                       what, need, unit, value(limit.rlim_cur), flag);
    }
    return need;
  };
  now.files = ensure(RLIMIT_NOFILE, files, "n", "open files");
  now.threads = ensure(RLIMIT_NPROC, threads, "u", "threads and processes");
  return now;
}

}  // namespace rlcpp
