#include "engine/block_manager.h"

#include <fmt/format.h>

#include "util/error.h"

namespace rlcpp {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size) : block_size_(block_size) {
  RLCPP_CHECK(n_blocks > 0 && block_size > 0, "n_blocks {} block_size {}", n_blocks, block_size);
  ref_.assign(static_cast<size_t>(n_blocks), 0);
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockManager::allocate() {
  RLCPP_CHECK(!free_.empty(), "no free KV block ({} in all)", ref_.size());
  const int32_t block = free_.back();
  free_.pop_back();
  ref_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockManager::share(int32_t block) {
  RLCPP_CHECK(ref_.at(static_cast<size_t>(block)) > 0, "sharing free block {}", block);
  ++ref_[static_cast<size_t>(block)];
}

void BlockManager::release(int32_t block) {
  int32_t& count = ref_.at(static_cast<size_t>(block));
  RLCPP_CHECK(count > 0, "releasing free block {}", block);
  if (--count == 0) free_.push_back(block);
}

std::string BlockManager::check(const std::vector<int32_t>& owners_counts) const {
  std::vector<int> in_free(ref_.size(), 0);
  for (int32_t b : free_) {
    if (b < 0 || static_cast<size_t>(b) >= ref_.size()) return fmt::format("free list holds bad block {}", b);
    if (++in_free[static_cast<size_t>(b)] > 1) return fmt::format("block {} is in the free list twice", b);
  }
  for (size_t b = 0; b < ref_.size(); ++b) {
    if (in_free[b] && ref_[b] != 0) return fmt::format("block {} is free and owned ({} refs)", b, ref_[b]);
    if (!in_free[b] && ref_[b] == 0) return fmt::format("block {} is neither free nor owned (leaked)", b);
    const int32_t owners = b < owners_counts.size() ? owners_counts[b] : 0;
    if (owners != ref_[b]) return fmt::format("block {} has {} refs but {} owners", b, ref_[b], owners);
  }
  return "";
}

}  // namespace rlcpp
