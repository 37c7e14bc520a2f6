// KV-cache blocks: a fixed pool of `n_blocks` blocks of `block_size` token slots, handed out from a
// free list and shared by reference count (the G samples of a prompt share its blocks). Pure
// bookkeeping; the tensors live in KvCache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlcpp {

class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return static_cast<int64_t>(ref_.size()); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  int32_t ref_count(int32_t block) const { return ref_[static_cast<size_t>(block)]; }

  int32_t allocate();                 // one block with reference count 1; the pool must not be empty
  void share(int32_t block);          // one more owner
  void release(int32_t block);        // one owner fewer; back to the free list at zero

  // Every block is free (count 0, in the free list once) or owned (count > 0, not in it), never
  // both; `owners` counts the references held by live sequences and must equal the counts.
  // Returns an empty string when consistent, else what is wrong.
  std::string check(const std::vector<int32_t>& owners_counts) const;

 private:
  int64_t block_size_;
  std::vector<int32_t> ref_;
  std::vector<int32_t> free_;  // a stack: last freed, first reused
};

}  // namespace rlcpp
