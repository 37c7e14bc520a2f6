#include "io/checkpoint.h"

#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "util/error.h"
#include "util/file.h"
#include "util/json.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
}  // namespace

CheckpointReader::CheckpointReader(const fs::path& model_dir) : dir_(model_dir) {
  if (!fs::is_directory(model_dir)) {
    throw_user_error("model directory '{}' does not exist (expected a Hugging Face model folder)", model_dir.string());
  }
  const fs::path index_path = model_dir / kIndexFile;
  if (fs::exists(index_path)) {
    const Json index = load_json_file(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw_user_error("{}: missing \"weight_map\" object", index_path.string());
    }
    std::map<std::string, size_t> file_ids;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        throw_user_error("{}: weight_map entry \"{}\" is not a file name", index_path.string(), it.key());
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..") {
        throw_user_error("{}: weight_map entry \"{}\" names a file outside the directory: {}", index_path.string(),
                         it.key(), shard);
      }
      auto found = file_ids.find(shard);
      if (found == file_ids.end()) {
        if (!fs::exists(model_dir / shard)) {
          throw_user_error("{}: shard '{}' (holding \"{}\") is missing from {}", index_path.string(), shard, it.key(),
                           model_dir.string());
        }
        found = file_ids.emplace(shard, files_.size()).first;
        files_.push_back(SafetensorsFile::open(model_dir / shard));
      }
      if (files_[found->second]->find(it.key()) == nullptr) {
        throw_user_error("{}: \"{}\" is mapped to '{}' but that shard does not contain it", index_path.string(),
                         it.key(), shard);
      }
      where_[it.key()] = found->second;
    }
    return;
  }
  if (fs::exists(model_dir / kSingleFile)) {
    files_.push_back(SafetensorsFile::open(model_dir / kSingleFile));
  } else {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(model_dir)) {
      if (entry.path().extension() == ".safetensors") found.push_back(entry.path());
    }
    if (found.empty()) {
      throw_user_error("no weights in '{}': expected {} or {} (PyTorch .bin checkpoints are not supported; convert "
                       "them to safetensors)", model_dir.string(), kSingleFile, kIndexFile);
    }
    std::sort(found.begin(), found.end());
    for (const auto& path : found) files_.push_back(SafetensorsFile::open(path));
  }
  for (size_t f = 0; f < files_.size(); ++f) {
    for (const auto& info : files_[f]->tensors()) {
      if (!where_.emplace(info.name, f).second) {
        throw_user_error("tensor \"{}\" appears in both '{}' and '{}'", info.name,
                         files_[where_[info.name]]->path().string(), files_[f]->path().string());
      }
    }
  }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

const StTensorInfo& CheckpointReader::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw_user_error("{}: no weight named \"{}\"", dir_.string(), name);
  return *files_[it->second]->find(name);
}

torch::Tensor CheckpointReader::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw_user_error("{}: no weight named \"{}\"", dir_.string(), name);
  return files_[it->second]->tensor(name);
}

void CheckpointReader::release(const std::string& name) const {
  const auto view = tensor(name);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(view.data_ptr()) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(view.data_ptr()) + view.nbytes() + page - 1) / page * page;
  // Advice only: a failure leaves the pages resident, which is merely today's behaviour.
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

uint64_t CheckpointReader::bytes_on_disk() const {
  uint64_t total = 0;
  for (const auto& file : files_) total += fs::file_size(file->path());
  return total;
}

void save_checkpoint(const fs::path& model_dir, const NamedTensors& tensors, uint64_t max_shard_bytes) {
  fs::create_directories(model_dir);
  std::vector<NamedTensors> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (const auto& named : tensors) {
    const uint64_t nbytes = static_cast<uint64_t>(named.second.numel()) * named.second.element_size();
    if (max_shard_bytes > 0 && !shards.back().empty() && shard_bytes + nbytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(named);
    shard_bytes += nbytes;
    total_bytes += nbytes;
  }
  // Remove weight files of an earlier save so a reader never mixes two generations.
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".safetensors" || name == kIndexFile) fs::remove(entry.path());
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    save_safetensors(model_dir / kSingleFile, shards[0], metadata);
    return;
  }
  nlohmann::ordered_json weight_map;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    save_safetensors(model_dir / file, shards[i], metadata);
    for (const auto& [name, tensor] : shards[i]) weight_map[name] = file;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total_bytes}};
  index["weight_map"] = weight_map;
  write_file_atomic(model_dir / kIndexFile, index.dump(2) + "\n");
}

void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
                           "vocab.json", "merges.txt"}) {
    if (std::filesystem::exists(from / name)) {
      std::filesystem::copy_file(from / name, to / name, std::filesystem::copy_options::overwrite_existing);
    }
  }
}

}  // namespace rlcpp
