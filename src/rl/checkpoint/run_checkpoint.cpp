#include "rl/checkpoint/run_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/serialize.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/file.h"
#include "util/json.h"

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

// step-<n> directories of a run, oldest first.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  if (!fs::is_directory(run_dir)) return out;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("step-", 0) != 0) continue;
    try {
      size_t used = 0;
      const int64_t n = std::stoll(name.substr(5), &used);
      if (used == name.size() - 5) out.emplace_back(n, entry.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Writes the archive `fill` builds straight into `path`, without holding its bytes in memory: a
// full fine-tune's optimizer state is twice the model, and a copy in a string (then another of
// that string) made checkpoint saving the peak of such runs. LibTorch's writer must never see a
// failed write (its destructor would throw again and terminate): the first error is remembered,
// the rest of the archive discarded, and the error raised once the writer is done.
void save_archive(const fs::path& path, const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  torch::serialize::OutputArchive archive;
  fill(archive);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) throw_user_error("cannot create '{}': {}", path.string(), std::strerror(errno));
  int error = 0;
  archive.save_to([&](const void* data, size_t n) -> size_t {
    if (error == 0 && std::fwrite(data, 1, n, file) != n) error = errno != 0 ? errno : EIO;
    return n;
  });
  if (std::fflush(file) != 0 && error == 0) error = errno;
  if (error == 0 && ::fsync(::fileno(file)) != 0) error = errno;
  if (std::fclose(file) != 0 && error == 0) error = errno;
  if (error != 0) throw_user_error("cannot write '{}': {}", path.string(), std::strerror(error));
}

}  // namespace

std::vector<fs::path> optimizer_shard_files(const fs::path& state_dir) {
  std::vector<fs::path> out;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(state_dir, ignored)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("optimizer-shard-", 0) == 0 && entry.path().extension() == ".safetensors") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

constexpr int kShardTag = 9301;

// Optimizer state travels and is written in pieces of at most this many elements, so neither a
// sender nor trainer 0 holds a copy of a whole part's moments (twice a model's weights).
constexpr int64_t kPieceElements = int64_t{1} << 25;

nlohmann::json layout_json(const OptimizerPart& part) {
  auto out = nlohmann::json::array();
  for (const auto& [name, numel] : part.layout) out.push_back({name, numel});
  return out;
}

nlohmann::json part_json(const OptimizerPart& part) {
  return {{"tp_rank", part.tp_rank}, {"tp_size", part.tp_size}, {"stage", part.stage}, {"stages", part.stages},
          {"layout", layout_json(part)}};
}

// A layout from its JSON form (layout_json); nlohmann's exception when it is not one.
std::vector<std::pair<std::string, int64_t>> layout_of_json(const nlohmann::json& j) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& entry : j) out.emplace_back(entry.at(0).get<std::string>(), entry.at(1).get<int64_t>());
  return out;
}

OptimizerPart part_of_json(const nlohmann::json& j) {
  OptimizerPart part;
  part.tp_rank = j.at("tp_rank").get<int>();
  part.tp_size = j.at("tp_size").get<int>();
  part.stage = j.at("stage").get<int>();
  part.stages = j.at("stages").get<int>();
  part.layout = layout_of_json(j.at("layout"));
  return part;
}

void write_shard_file(const fs::path& path, const FlatAdamWState& s, const OptimizerPart& part) {
  std::map<std::string, std::string> metadata = {{"begin", std::to_string(s.begin)},
                                                 {"end", std::to_string(s.end)},
                                                 {"total", std::to_string(s.total)},
                                                 {"step", std::to_string(s.step)},
                                                 {"tp_rank", std::to_string(part.tp_rank)},
                                                 {"tp_size", std::to_string(part.tp_size)},
                                                 {"stage", std::to_string(part.stage)},
                                                 {"stages", std::to_string(part.stages)}};
  if (!part.layout.empty()) metadata["layout"] = layout_json(part).dump();
  save_safetensors(path, {{"exp_avg", s.exp_avg}, {"exp_avg_sq", s.exp_avg_sq}}, metadata);
}

fs::path shard_path(const fs::path& state_dir, int rank, int senders, int64_t piece) {
  return state_dir / fmt::format("optimizer-shard-{:03d}-of-{:03d}-{:03d}.safetensors", rank, senders, piece);
}

int64_t n_pieces(const OptimizerShard& s) { return std::max<int64_t>(1, (s.end - s.begin + kPieceElements - 1) / kPieceElements); }

FlatAdamWState piece_of(const OptimizerShard& s, int64_t k) {
  const int64_t a = s.begin + k * kPieceElements, b = std::min(s.end, a + kPieceElements);
  return s.range(a, b);
}

// One shard file of a checkpoint, its metadata read and its tensors mapped (not copied).
struct SavedPiece {
  FlatAdamWState state;
  OptimizerPart part;  // its layout empty when the file has none (written before shards named their tensors)
  bool names_stage = false;  // "stages" in its metadata; before, --pp's shards counted tp × pp parts in tp_size
};

SavedPiece read_saved_piece(const fs::path& path) {
  auto file = SafetensorsFile::open(path);
  auto number = [&](const char* key, std::optional<int64_t> absent = std::nullopt) -> int64_t {
    auto it = file->metadata().find(key);
    if (it == file->metadata().end() && absent) return *absent;  // written before tensor or pipeline parallelism
    if (it == file->metadata().end()) throw_user_error("{}: no \"{}\" in its metadata; not an rlcpp optimizer shard", path.string(), key);
    try {
      return std::stoll(it->second);
    } catch (const std::exception&) {
      throw_user_error("{}: metadata \"{}\" = \"{}\" is not a number", path.string(), key, it->second);
    }
  };
  SavedPiece piece;
  piece.names_stage = file->metadata().count("stages") > 0;
  piece.part.tp_rank = static_cast<int>(number("tp_rank", 0));
  piece.part.tp_size = static_cast<int>(number("tp_size", 1));
  piece.part.stage = static_cast<int>(number("stage", 0));
  piece.part.stages = static_cast<int>(number("stages", 1));
  if (auto it = file->metadata().find("layout"); it != file->metadata().end()) {
    const auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (j.is_discarded() || !j.is_array()) throw_user_error("{}: metadata \"layout\" is not a JSON array", path.string());
    try {
      piece.part.layout = layout_of_json(j);
    } catch (const nlohmann::json::exception& e) {
      throw_user_error("{}: metadata \"layout\" is not a list of [name, elements] ({})", path.string(), e.what());
    }
  }
  piece.state.begin = number("begin");
  piece.state.end = number("end");
  piece.state.total = number("total");
  piece.state.step = number("step");
  piece.state.exp_avg = file->tensor("exp_avg");
  piece.state.exp_avg_sq = file->tensor("exp_avg_sq");
  if (piece.state.exp_avg.numel() != piece.state.end - piece.state.begin ||
      piece.state.exp_avg_sq.numel() != piece.state.exp_avg.numel()) {
    throw_user_error("{}: exp_avg holds {} elements for the range [{}, {})", path.string(), piece.state.exp_avg.numel(),
                     piece.state.begin, piece.state.end);
  }
  return piece;
}

// The pieces of one saved part (one stage of one tensor-parallel rank) and where its tensors lie in
// its flat state.
struct SavedPart {
  std::vector<FlatAdamWState> pieces;
  std::map<std::string, std::pair<int64_t, int64_t>> tensors;  // name → (offset, elements)
};

// [begin, end) of a part of `total` elements laid out as `part.layout`, each tensor's moments taken
// by name from the first saved stage that holds it (a tied embedding's copies are alike).
FlatAdamWState state_by_name(const std::map<int, SavedPart>& saved, int64_t begin, int64_t end, int64_t total,
                             const OptimizerPart& part, const std::string& where) {
  FlatAdamWState out;
  out.begin = begin;
  out.end = end;
  out.total = total;
  int64_t offset = 0;
  for (const auto& [name, numel] : part.layout) {
    const int64_t a = std::max(begin, offset), b = std::min(end, offset + numel);
    if (a < b) {
      const SavedPart* from = nullptr;
      int64_t at = 0;
      for (const auto& [stage, s] : saved) {
        const auto it = s.tensors.find(name);
        if (it == s.tensors.end()) continue;
        if (it->second.second != numel) {
          throw_user_error("{}: the optimizer state of {} holds {} elements, this run trains {}; the model or its "
                           "tensor-parallel split changed: resume with the checkpoint's settings", where, name,
                           it->second.second, numel);
        }
        from = &s;
        at = it->second.first;
        break;
      }
      if (from == nullptr) {
        throw_user_error("{}: no optimizer shard holds the state of {} (tensor-parallel rank {}); the trained parameters "
                         "changed (LoRA settings, the model) or a shard file is missing: resume with the checkpoint's "
                         "settings from a complete checkpoint", where, name, part.tp_rank);
      }
      const auto piece = assemble_flat_state(from->pieces, at + (a - offset), at + (b - offset), where);
      if (!out.exp_avg.defined()) {
        out.step = piece.step;
        out.exp_avg = torch::empty({end - begin}, piece.exp_avg.options());
        out.exp_avg_sq = torch::empty({end - begin}, piece.exp_avg.options());
      } else if (piece.step != out.step) {
        throw_user_error("{}: the optimizer shards disagree (step {} against {}); the checkpoint is damaged: resume from "
                         "an earlier one", where, piece.step, out.step);
      }
      out.exp_avg.narrow(0, a - begin, b - a).copy_(piece.exp_avg);
      out.exp_avg_sq.narrow(0, a - begin, b - a).copy_(piece.exp_avg_sq);
    }
    offset += numel;
  }
  RLCPP_CHECK(offset == total, "a layout of {} elements for a part of {}", offset, total);
  return out;
}

}  // namespace

OptimizerShard optimizer_shard(const FlatAdamWState& held, OptimizerPart part) {
  OptimizerShard out{held.begin, held.end, std::move(part), {}};
  out.range = [held](int64_t a, int64_t b) {
    FlatAdamWState s = held;
    s.begin = a;
    s.end = b;
    s.exp_avg = held.exp_avg.narrow(0, a - held.begin, b - a);
    s.exp_avg_sq = held.exp_avg_sq.narrow(0, a - held.begin, b - a);
    return s;
  };
  return out;
}

void send_optimizer_shard(Communicator& senders, const OptimizerShard& mine) {
  const int64_t n = n_pieces(mine);
  auto first = part_json(mine.part);
  first["pieces"] = n;
  senders.send_bytes(first.dump(), 0, kShardTag);
  for (int64_t k = 0; k < n; ++k) {
    const FlatAdamWState s = piece_of(mine, k);
    const nlohmann::json header = {{"begin", s.begin}, {"end", s.end}, {"total", s.total}, {"step", s.step},
                                   {"dtype", static_cast<int>(s.exp_avg.scalar_type())}};
    senders.send_bytes(header.dump(), 0, kShardTag);
    senders.send(s.exp_avg, 0, kShardTag);
    senders.send(s.exp_avg_sq, 0, kShardTag);
  }
}

void write_optimizer_shards(const fs::path& state_dir, Communicator& senders, const OptimizerShard& mine) {
  for (int64_t k = 0; k < n_pieces(mine); ++k) {
    write_shard_file(shard_path(state_dir, 0, senders.size(), k), piece_of(mine, k), mine.part);
  }
  for (int r = 1; r < senders.size(); ++r) {  // one piece in memory at a time
    const auto first = nlohmann::json::parse(senders.recv_bytes(r, kShardTag));
    const OptimizerPart part = part_of_json(first);
    const int64_t n = first.at("pieces").get<int64_t>();
    for (int64_t k = 0; k < n; ++k) {
      const auto header = nlohmann::json::parse(senders.recv_bytes(r, kShardTag));
      FlatAdamWState s;
      s.begin = header.at("begin").get<int64_t>();
      s.end = header.at("end").get<int64_t>();
      s.total = header.at("total").get<int64_t>();
      s.step = header.at("step").get<int64_t>();
      const auto dtype = static_cast<torch::ScalarType>(header.at("dtype").get<int>());
      s.exp_avg = torch::empty({s.end - s.begin}, torch::TensorOptions().dtype(dtype));
      s.exp_avg_sq = torch::empty_like(s.exp_avg);
      senders.recv(s.exp_avg, r, kShardTag);
      senders.recv(s.exp_avg_sq, r, kShardTag);
      write_shard_file(shard_path(state_dir, r, senders.size(), k), s, part);
    }
  }
}

FlatAdamWState read_optimizer_shards(const fs::path& state_dir, int64_t begin, int64_t end, int64_t total,
                                     const OptimizerPart& part) {
  // This tensor-parallel rank's pieces, by the stage they were saved from.
  std::map<int, SavedPart> saved;
  bool named = !part.layout.empty();
  const auto files = optimizer_shard_files(state_dir);
  for (const auto& path : files) {
    SavedPiece piece = read_saved_piece(path);
    if (!piece.names_stage && part.stages > 1 && piece.part.tp_size == part.tp_size * part.stages) {
      // Written by --pp before shards named their stage: part stage · tp + tp rank of tp × pp.
      piece.part.stage = piece.part.tp_rank / part.tp_size;
      piece.part.tp_rank %= part.tp_size;
      piece.part.tp_size = part.tp_size;
    }
    if (piece.part.tp_size != part.tp_size) {
      throw_user_error("{}: the optimizer state was saved by parts of {} tensor-parallel ranks, this run has {}; resume "
                       "with --train-tp {} (the model directory itself loads at any)", path.string(), piece.part.tp_size,
                       part.tp_size, piece.part.tp_size);
    }
    if (piece.part.tp_rank != part.tp_rank) continue;  // another part's
    if (piece.part.layout.empty()) named = false;  // written before layouts: read as saved
    auto& into = saved[piece.part.stage];
    if (into.tensors.empty() && !piece.part.layout.empty()) {
      int64_t offset = 0;
      for (const auto& [name, numel] : piece.part.layout) {
        into.tensors.emplace(name, std::make_pair(offset, numel));
        offset += numel;
      }
    }
    into.pieces.push_back(std::move(piece.state));
  }
  if (saved.empty() && begin < end) {
    throw_user_error("{}: no optimizer.pt, and none of its {} optimizer shards is of tensor-parallel rank {}: a shard file "
                     "is missing; resume from a complete checkpoint", state_dir.string(), files.size(), part.tp_rank);
  }
  if (begin == end) {
    FlatAdamWState empty;
    empty.total = total;
    return empty;
  }
  if (named) return state_by_name(saved, begin, end, total, part, state_dir.string());
  // As saved: this stage's part of the same tensors, in the same order.
  const auto same_stage = saved.find(part.stage);
  if (same_stage == saved.end()) {
    throw_user_error("{}: the optimizer shards name no tensors, and none is of pipeline stage {}: resume with the "
                     "checkpoint's --pp", state_dir.string(), part.stage);
  }
  std::vector<FlatAdamWState> pieces;
  for (auto& piece : same_stage->second.pieces) {
    if (piece.total != total) {
      throw_user_error("{}: the optimizer state covers {} trained elements, this run trains {}; the trained parameters "
                       "changed (LoRA settings, the model): resume with the checkpoint's settings",
                       state_dir.string(), piece.total, total);
    }
    if (piece.end > begin && piece.begin < end) pieces.push_back(piece);
  }
  if (pieces.empty()) {
    throw_user_error("{}: none of its {} optimizer shards covers elements [{}, {}): a shard file is missing; resume from "
                     "a complete checkpoint", state_dir.string(), files.size(), begin, end);
  }
  return assemble_flat_state(pieces, begin, end, state_dir.string());
}

namespace {

// A pipeline's stages, gathered: config.json as save_pretrained writes it, and the weights.
void save_gathered(const fs::path& dir, const Transformer& model, const NamedTensors& weights) {
  fs::create_directories(dir);
  auto config_json = model.config().raw;
  config_json["torch_dtype"] = dtypes().name(model.options().dtype);
  write_file_atomic(dir / "config.json", config_json.dump(2) + "\n");
  save_checkpoint(dir, weights);
}

// The generators a step draws from, with their files in trainer_state/: the CPU's (rng.pt) and, on
// an accelerator, the device's too (rng-cuda.pt: LoRA dropout and the replays of recomputed layers
// there), so a resumed run draws what the run never stopped would have.
std::vector<std::pair<std::string, at::Generator>> run_generators(const torch::Device& device) {
  std::vector<std::pair<std::string, at::Generator>> generators = {{"rng.pt", at::detail::getDefaultCPUGenerator()}};
  if (!device.is_cpu()) {
    generators.emplace_back(fmt::format("rng-{}.pt", c10::DeviceTypeName(device.type(), /*lower_case=*/true)),
                            at::globalContext().defaultGenerator(device));
  }
  return generators;
}

}  // namespace

void save_policy_dir(const fs::path& dir, const Transformer& policy, const fs::path& tokenizer_from,
                     const std::string& base_model, bool save_merged, const NamedTensors* weights,
                     const NamedTensors* merged) {
  if (weights != nullptr && policy.has_adapters()) {  // a pipeline's stages' adapters, gathered: as save_adapter writes them
    fs::create_directories(dir);
    write_file_atomic(dir / kAdapterConfigFile,
                      peft_adapter_config(policy.lora(), base_model, policy.config().classifier()).dump(2) + "\n");
    NamedTensors tensors;
    for (const auto& [name, tensor] : *weights) tensors.emplace_back(kPeftKeyPrefix + name, tensor);
    save_safetensors(dir / kAdapterWeightsFile, tensors);
    if (save_merged) {
      RLCPP_CHECK(merged != nullptr, "a pipeline's adapters saved with --save-merged but without the merged weights");
      save_gathered(dir / "merged", policy, *merged);
      copy_tokenizer_files(tokenizer_from, dir / "merged");
    }
  } else if (weights != nullptr) {
    save_gathered(dir, policy, *weights);
  } else if (policy.has_adapters()) {
    policy.save_adapter(dir, base_model);
    if (save_merged) {
      policy.save_pretrained(dir / "merged");
      copy_tokenizer_files(tokenizer_from, dir / "merged");
    }
  } else {
    policy.save_pretrained(dir);
  }
  copy_tokenizer_files(tokenizer_from, dir);
}

void save_critic_dir(const fs::path& dir, const Transformer& critic, const fs::path& tokenizer_from,
                     torch::optim::Optimizer& optimizer, const std::function<void(const fs::path& state_dir)>& write_shards,
                     const NamedTensors* weights) {
  if (weights != nullptr) save_gathered(dir, critic, *weights);
  else critic.save_pretrained(dir);
  copy_tokenizer_files(tokenizer_from, dir);
  const fs::path state_dir = dir / "trainer_state";
  fs::create_directories(state_dir);
  if (write_shards) {
    write_shards(state_dir);
  } else {
    save_archive(state_dir / "optimizer.pt", [&](torch::serialize::OutputArchive& archive) { optimizer.save(archive); });
  }
}

namespace {

// What a checkpoint takes on disk, roughly: the weights it writes (the whole model in the policy's
// dtype; under LoRA the adapters, and the merged model with save_merged), the AdamW moments (two
// fp32 numbers per trained element), and as much again for a critic beside them (PPO).
struct CheckpointSize {
  int64_t weights = 0, optimizer = 0, extra = 0, files = 0;  // files: the tokenizer's and the like, copied
  int64_t total() const { return (weights + optimizer + extra + files) / 20 * 21 + (64 << 10); }  // 5% and 64 KiB over
};

CheckpointSize checkpoint_size(const CheckpointContents& c) {
  CheckpointSize size;
  const int64_t whole = c.policy->config().parameter_count();
  const auto weights = c.policy->named_weights();
  const int64_t element = weights.empty() ? 4 : static_cast<int64_t>(weights.front().second.element_size());
  int64_t trained = whole;
  if (c.policy->has_adapters()) {
    trained = 0;
    for (const auto& [name, t] : c.policy->trained_weights()) trained += t.numel();
    size.weights = trained * 4 + (c.save_merged ? whole * element : 0);
  } else {
    size.weights = whole * element;
  }
  size.optimizer = 8 * trained;
  if (c.write_extra) size.extra = size.weights + size.optimizer;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(c.tokenizer_from, ec)) {  // copied beside each model directory
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file(ec) && ext != ".safetensors" && ext != ".bin" && ext != ".pt") {
      size.files += static_cast<int64_t>(entry.file_size(ec)) * (c.save_merged ? 2 : 1);
    }
  }
  return size;
}

}  // namespace

fs::path save_run_checkpoint(const fs::path& run_dir, int64_t step, const CheckpointContents& c, int64_t max_checkpoints) {
  const fs::path final_dir = run_dir / fmt::format("step-{}", step);
  const fs::path tmp = run_dir / fmt::format(".step-{}.tmp", step);
  {
    // Refused before a byte is written when the disk cannot take it, rather than failing half-way.
    std::error_code ec;
    const auto space = fs::space(run_dir, ec);
    const CheckpointSize size = checkpoint_size(c);
    if (!ec && static_cast<int64_t>(space.available) < size.total()) {
      const auto saved = step_dirs(run_dir);
      const auto mib = [](auto bytes) { return static_cast<double>(bytes) / (1 << 20); };
      throw_user_error("checkpoint step-{}: {} has {:.1f} MiB free and the checkpoint needs about {:.1f} MiB (weights "
                       "{:.1f} MiB, optimizer state {:.1f} MiB{}); nothing was written. Free space there, or move the run "
                       "elsewhere (-sd), then --resume auto goes on from {}", step, run_dir.string(), mib(space.available),
                       mib(size.total()), mib(size.weights), mib(size.optimizer),
                       size.extra > 0 ? fmt::format(", critic {:.1f} MiB", mib(size.extra)) : "",
                       saved.empty() ? std::string("the start") : saved.back().second.filename().string());
    }
  }
  fs::path writing = tmp;  // what is being written, for the error
  try {
    fs::remove_all(tmp);
    writing = tmp / (c.policy->has_adapters() ? kAdapterWeightsFile : "model.safetensors");
    save_policy_dir(tmp, *c.policy, c.tokenizer_from, c.base_model, c.save_merged, c.weights, c.merged);
    failpoint("checkpoint");  // the weights written, the optimizer state not yet
    const fs::path state_dir = tmp / "trainer_state";
    fs::create_directories(state_dir);
    writing = state_dir / "state.json";
    write_file_atomic(writing, c.state.dump(1) + "\n");
    writing = state_dir / "config.json";
    write_file_atomic(writing, c.config.dump(2) + "\n");
    if (c.write_optimizer) {
      writing = state_dir / "optimizer-shard-*.safetensors";
      c.write_optimizer(state_dir);
    } else {
      writing = state_dir / "optimizer.pt";  // inside the temporary directory: no rename of its own
      save_archive(writing, [&](torch::serialize::OutputArchive& archive) { c.optimizer->save(archive); });
    }
    for (auto& [file, generator] : run_generators(c.policy->options().device)) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      writing = state_dir / file;
      std::ostringstream rng_bytes;
      torch::save(generator.get_state(), rng_bytes);
      write_file_atomic(writing, rng_bytes.str());
    }
    if (c.write_extra) {
      writing = tmp / "critic";
      c.write_extra(tmp);
    }
  } catch (const std::exception& e) {
    // A failed write (a full disk, above all) leaves no partial checkpoint behind; the earlier
    // ones and `latest` are untouched.
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    std::string reason = e.what();
    reason = reason.substr(0, reason.find('\n'));
    const auto space = fs::space(run_dir, ignored);
    throw_user_error("checkpoint step-{}: writing {} failed: {} ({} MiB free on its disk); the partial checkpoint was "
                     "removed and the earlier ones are intact", step, writing.string(), reason,
                     ignored ? -1 : static_cast<int64_t>(space.available >> 20));
  }
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  write_file_atomic(run_dir / "latest", fmt::format("step-{}\n", step));
  if (max_checkpoints > 0) {
    auto dirs = step_dirs(run_dir);
    for (size_t k = 0; k + static_cast<size_t>(max_checkpoints) < dirs.size(); ++k) {
      if (dirs[k].second == final_dir) continue;
      spdlog::info("removing {} (--max-checkpoints {})", dirs[k].second.string(), max_checkpoints);
      fs::remove_all(dirs[k].second);
    }
  }
  return final_dir;
}

fs::path save_run_checkpoint(const RunConfig& config, const fs::path& run_dir, int64_t step, const Transformer& policy,
                             torch::optim::Optimizer& optimizer, nlohmann::json state,
                             std::function<void(const fs::path& state_dir)> write_optimizer, const NamedTensors* weights,
                             std::function<void(const fs::path& step_dir)> write_extra, const NamedTensors* merged) {
  CheckpointContents contents;
  contents.merged = merged;
  contents.write_extra = std::move(write_extra);
  contents.weights = weights;
  contents.policy = &policy;
  contents.optimizer = &optimizer;
  contents.write_optimizer = std::move(write_optimizer);
  contents.state = std::move(state);
  contents.config = run_config_json(config);
  contents.tokenizer_from = config.model.path;
  // As given when it is a path that exists from here, so the adapter finds its base from any directory.
  contents.base_model = fs::exists(config.model.path) ? fs::absolute(config.model.path).lexically_normal().string() : config.model.path;
  contents.save_merged = config.logging.save_merged;
  const auto dir = save_run_checkpoint(run_dir, step, contents, config.logging.max_checkpoints);
  spdlog::info("checkpoint {}", dir.string());
  return dir;
}

std::optional<fs::path> find_resume_checkpoint(const RunConfig& config, const fs::path& run_dir) {
  auto latest_of = [](const fs::path& dir) -> std::optional<fs::path> {
    if (!fs::exists(dir / "latest")) return std::nullopt;
    std::string name = read_file(dir / "latest");
    name.erase(name.find_last_not_of(" \n\r\t") + 1);
    const fs::path step = dir / name;
    if (!fs::is_directory(step / "trainer_state")) {
      throw_user_error("{}: names {}, which is not a checkpoint (no trainer_state/); give -cp a step-N directory",
                       (dir / "latest").string(), step.string());
    }
    return step;
  };
  if (config.runtime.resume == "auto") {
    auto step = latest_of(run_dir);
    if (!step) spdlog::info("--resume auto: no checkpoint in {} yet, starting a fresh run", run_dir.string());
    return step;
  }
  if (config.runtime.checkpoint_path.empty() || !config.runtime.enable_resume_training) return std::nullopt;
  const fs::path path = config.runtime.checkpoint_path;
  if (config.runtime.resume_step > 0) {  // ChatLearn's load_data_checkpoint_iteration: that step of the run
    const fs::path step = path / fmt::format("step-{}", config.runtime.resume_step);
    if (fs::is_directory(step / "trainer_state")) return step;
    throw_user_error("--resume-step {}: {} is not a checkpoint of the run in -cp {}", config.runtime.resume_step, step.string(),
                     path.string());
  }
  if (fs::is_directory(path / "trainer_state")) return path;
  if (auto step = latest_of(path)) return step;
  throw_user_error("-cp/--checkpoint-path {}: neither a checkpoint (step-N with trainer_state/) nor a run directory "
                   "with a `latest` file", path.string());
}

nlohmann::json read_checkpoint_state(const fs::path& step_dir, const RunConfig& config) {
  const fs::path state_dir = step_dir / "trainer_state";
  for (const char* name : {"state.json", "config.json", "optimizer.pt"}) {
    if (std::string(name) == "optimizer.pt" && !optimizer_shard_files(state_dir).empty()) continue;  // ZeRO's shards
    if (!fs::exists(state_dir / name)) {
      throw_user_error("{}: missing {}; the checkpoint is incomplete (or from an older rlcpp) and cannot be resumed",
                       state_dir.string(), name);
    }
  }
  const auto recorded = nlohmann::ordered_json::parse(read_file(state_dir / "config.json"), nullptr, false);
  if (recorded.is_discarded()) throw_user_error("{}: not valid JSON", (state_dir / "config.json").string());
  const auto differing = incompatible_settings(recorded, config);
  if (!differing.empty()) {
    std::string list;
    for (const auto& d : differing) list += "\n  " + d;
    throw_user_error("{} was written by a run with other settings; resuming it with these would not continue the same "
                     "run. Differing (checkpoint -> now):{}\nUse the checkpoint's settings (its trainer_state/config.json"
                     " is a run file for --config), or start a fresh run.",
                     step_dir.string(), list);
  }
  return load_json_file(state_dir / "state.json");
}

void load_checkpoint_optimizer(const fs::path& step_dir, Trainer& trainer, const OptimizerPart& part) {
  const fs::path state_dir = step_dir / "trainer_state";
  auto& optimizer = trainer.optimizer();
  const auto params = optimizer.param_groups().at(0).params();
  const bool whole = fs::exists(state_dir / "optimizer.pt");
  if (whole && (part.tp_size > 1 || part.stages > 1)) {
    throw_user_error("{}: the optimizer state is of one process's whole model (a run without tensor or pipeline "
                     "parallelism); resume with --train-tp 1 and --pp 1 (the model directory itself loads at any)",
                     (state_dir / "optimizer.pt").string());
  }
  if (whole) {
    try {
      torch::load(optimizer, (state_dir / "optimizer.pt").string());
    } catch (const c10::Error& e) {
      throw_user_error("{}: cannot load the optimizer state ({})", (state_dir / "optimizer.pt").string(),
                       e.what_without_backtrace());
    }
  }
  // Re-sharding: a ZeRO trainer takes its range of whatever the checkpoint holds (one whole state or
  // the shards of any number of trainers and stages); an unsharded trainer assembles its whole part.
  if (auto* zero = trainer.zero()) {
    zero->load_state(whole ? flat_adamw_state(optimizer, params, zero->begin(), zero->end())
                           : read_optimizer_shards(state_dir, zero->begin(), zero->end(), zero->total(), part));
    optimizer.state().clear();
  } else if (!whole) {
    const int64_t total = flat_numel(params);
    set_adamw_state(optimizer, params, read_optimizer_shards(state_dir, 0, total, total, part));
  }
  for (auto& [file, generator] : run_generators(params.empty() ? torch::Device(torch::kCPU) : params.front().device())) {
    if (!fs::exists(state_dir / file)) continue;  // (a run on the CPU saved no device's)
    torch::Tensor state;
    torch::load(state, (state_dir / file).string());
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
}

fs::path prepare_metrics_file(const fs::path& run_dir, const RunConfig& config, std::optional<int64_t> resumed_step) {
  const fs::path path = run_dir / "metrics.jsonl";
  if (resumed_step) {
    rewind_metrics(path, *resumed_step);
  } else if (config.runtime.resume == "auto") {
    rewind_metrics(path, 0);  // killed before its first checkpoint: start over, keeping the old lines aside
  } else if (fs::exists(path) && fs::file_size(path) > 0) {
    throw_user_error("{} already holds a run (metrics.jsonl); continue it with --resume auto, or choose another "
                     "-p/--project or -sd/--save-dir", run_dir.string());
  }
  return path;
}

void rewind_metrics(const fs::path& metrics_path, int64_t step) {
  if (!fs::exists(metrics_path)) return;
  std::istringstream in(read_file(metrics_path));
  std::string kept, discarded, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    // The steps after `step`, and the status line of the run that ended (the run goes on).
    const bool later = !j.is_discarded() && ((j.contains("step") && j["step"].is_number() && j["step"].get<int64_t>() > step) ||
                                             (j.contains("status") && !j.contains("step")));
    (later ? discarded : kept) += line + "\n";
  }
  if (discarded.empty()) return;
  std::ofstream(metrics_path.parent_path() / "metrics.discarded.jsonl", std::ios::app) << discarded;
  write_file_atomic(metrics_path, kept);
  spdlog::info("{}: steps after {} moved to metrics.discarded.jsonl (they are run again)", metrics_path.string(), step);
}

}  // namespace rlcpp
