// Hugging Face weight files in a model directory: `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ({"metadata": {"total_size": N}, "weight_map": {name: file}}).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace rlcpp {

class CheckpointReader {
 public:
  // Opens the weights of `model_dir`; a directory without weights, a broken index or a shard the
  // index names but that is missing is a UserError naming the file.
  explicit CheckpointReader(const std::filesystem::path& model_dir);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const StTensorInfo& info(const std::string& name) const;
  torch::Tensor tensor(const std::string& name) const;  // zero-copy CPU view
  // Drops the mapped pages of `name` from this process's resident memory (they stay in the page
  // cache and fault back in if read again). For a loader that has copied the tensor out: without it
  // a load holds the file's pages and the copy at once, twice the weights at its peak.
  void release(const std::string& name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t bytes_on_disk() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name → index into files_
};

// Saves tensors under `model_dir` as one `model.safetensors` when they fit in `max_shard_bytes`
// (0 = never shard), else as `model-0000k-of-0000n.safetensors` shards plus the index. Tensors
// keep their order; a shard closes before the tensor that would overflow it. Stale weight files
// from an earlier save in the same directory are removed.
void save_checkpoint(const std::filesystem::path& model_dir, const NamedTensors& tensors,
                     uint64_t max_shard_bytes = 0);

// Copies the tokenizer and generation files a Hugging Face model directory carries (tokenizer.json,
// tokenizer_config.json, generation_config.json, special_tokens_map.json, vocab.json, merges.txt)
// from `from` into `to`, those that exist.
void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace rlcpp
