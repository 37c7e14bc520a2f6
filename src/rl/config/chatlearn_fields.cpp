#include "rl/config/chatlearn_fields.h"

#include <fmt/format.h>

#include "rl/config/run_config.h"
#include "rl/config/setting_values.h"
#include "util/error.h"

namespace rlcpp {

namespace {

using F = FieldFate;

// What refusals say: the feature and the issue that will build it.
const char* kOffload = "offload is not implemented yet (planned for device runs: optimizer and weight offload, issue 25)";
const char* kRay = "Ray's runtime environment; rlcpp is one binary started by mpirun, so there is nothing to package";
const char* kResources = "Ray resources; mpirun -np T+I (and --map-by, hostfiles) decide the processes and their placement";

// A value that leaves the setting at its default (ChatLearn's "unset" spelling).
const Json kUnset = Json(Json::value_t::discarded);

Json unset_if_negative(const Json& v, const std::string& where) { return read_int(v, where) < 0 ? kUnset : v; }

Json unset_if_null(const Json& v, const std::string&) { return v.is_null() ? kUnset : v; }

// zero_size N > 1 (FSDP's sharding group) is ZeRO-3 over the trainers; 1 or null: not sharded.
Json zero_size_stage(const Json& v, const std::string& where) {
  if (v.is_null()) return kUnset;
  const int64_t n = read_int(v, where);
  if (n < 1) throw_user_error("{}: {}: the number of ranks the parameters are sharded over is at least 1", where, n);
  return n == 1 ? kUnset : Json(3);
}

Json stream_loader_type(const Json& v, const std::string& where) {
  const std::string s = read_string(v, where);
  if (s == "fixed") return false;
  if (s == "dynamic") return true;
  throw_user_error("{}: \"{}\": use fixed or dynamic", where, s);
}

}  // namespace

const std::vector<ChatLearnField>& chatlearn_fields() {
  static const std::vector<ChatLearnField> table = {
      // RuntimeEnvConfig
      {"pip", "RuntimeEnvConfig", F::kNotice, "", kRay},
      {"py_modules", "RuntimeEnvConfig", F::kNotice, "", kRay},
      {"working_dir", "RuntimeEnvConfig", F::kNotice, "", kRay},
      {"platform", "RuntimeEnvConfig", F::kNotice, "", kRay},
      {"excludes", "RuntimeEnvConfig", F::kNotice, "", kRay},
      // RuntimeConfig
      {"num_episode", "RuntimeConfig", F::kImplemented, "runtime.num_episodes", "passes over the dataset"},
      {"sample_per_episode", "RuntimeConfig", F::kMapped, "train.sample_per_episode",
       "samples per step: -tbs = sample_per_episode / G"},
      {"num_training_epoch", "RuntimeConfig", F::kImplemented, "train.num_training_epoch", "passes over each step's rollouts"},
      {"generation_batch_size", "RuntimeConfig, ModelConfig", F::kImplemented, "rollout.inference_microbatch_size",
       "prompts per generate call (ModelConfig's -1: unset)", {}, unset_if_negative},
      {"train_micro_batch_size", "RuntimeConfig", F::kImplemented, "train.train_microbatch_size", "samples per forward/backward"},
      {"train_global_batch_size", "RuntimeConfig", F::kMapped, "train.train_global_batch_size",
       "samples per optimizer step: -tMbs = train_global_batch_size / G"},
      {"save_episode_interval", "RuntimeConfig", F::kImplemented, "logging.save_interval", "counted in steps"},
      {"log_interval", "RuntimeConfig", F::kImplemented, "logging.log_interval", "console line every N steps"},
      {"data_path", "RuntimeConfig", F::kImplemented, "runtime.dataset", "training JSONL"},
      {"colocation", "RuntimeConfig", F::kNotice, "",
       "Ray placement; without -i every role shares one process (colocated), with -t/-i each rank has one role"},
      {"eval_episode_interval", "RuntimeConfig", F::kImplemented, "eval.eval_interval", "counted in steps"},
      {"enable_resume_training", "RuntimeConfig", F::kImplemented, "runtime.enable_resume_training", ""},
      {"data_checkpoint_path", "RuntimeConfig", F::kImplemented, "runtime.checkpoint_path",
       "rlcpp's checkpoints hold the data cursor with the weights"},
      {"max_data_ckpt_nums", "RuntimeConfig", F::kImplemented, "logging.max_checkpoints", "keep the newest N checkpoints"},
      {"load_data_checkpoint_iteration", "RuntimeConfig", F::kMapped, "runtime.resume_step",
       "resume from step-N of data_checkpoint_path's run"},
      {"stream_data_loader_type", "RuntimeConfig", F::kMapped, "algorithm.dynamic_batching",
       "dynamic: generate until -tbs groups are kept (dynamic batching); fixed: one round per step", {},
       stream_loader_type},
      {"debug", "RuntimeConfig", F::kImplemented, "logging.debug", "debug-level log lines"},
      {"nsys", "RuntimeConfig", F::kNotice, "", "Nsight markers; use --profile-dir for rlcpp's Chrome traces"},
      {"profiler_dir", "RuntimeConfig", F::kImplemented, "logging.profile_dir", "Chrome traces per rank"},
      {"coalesce_param", "RuntimeConfig", F::kNotice, "",
       "weights are always synced in coalesced buckets of coalesced_buffer_mb", {"true"}},
      {"coalesced_buffer_mb", "RuntimeConfig", F::kImplemented, "parallel.sync_bucket_mb", ""},
      {"concurrent_comm", "RuntimeConfig", F::kNotice, "", "Ray's parallel sync actors; rlcpp syncs over one MPI group"},
      {"param_sync_comm_type", "RuntimeConfig", F::kImplemented, "parallel.param_sync_comm_type", ""},
      {"param_sync_max_workers", "RuntimeConfig", F::kNotice, "", "Ray's sync thread pool; rlcpp syncs over one MPI group"},
      {"max_relay_episode", "RuntimeConfig", F::kImplemented, "staleness.max_relay_episode",
       "steps whose rollouts are trained on again (-1: all, 0: off), with their rollout log-probs"},
      {"relay_episode_offset", "RuntimeConfig", F::kImplemented, "staleness.relay_episode_offset",
       "relayed rollouts join the steps after this many steps"},
      {"consumed_samples", "RuntimeConfig", F::kMapped, "runtime.consumed_samples",
       "a fresh run first skips this many prompts of the data order"},
      {"concurrent_setup", "RuntimeConfig", F::kNotice, "", "Ray actor set-up; every rank loads its model at start"},
      {"bucket_size_mb_in_memory_manager", "RuntimeConfig", F::kNotice, "", "Megatron's memory manager; not used"},
      {"free_sync_collective_group", "RuntimeConfig", F::kNotice, "", "the MPI sync group lives for the whole run"},
      {"cpu_schedule_strategy", "RuntimeConfig", F::kNotice, "",
       "placement is mpirun's: PACK is --map-by slot, SPREAD is --map-by node (or srun --distribution=block|cyclic)",
       {"PACK", "SPREAD"}},
      {"exp_name", "RuntimeConfig", F::kImplemented, "logging.project", "run name"},
      {"output_dir", "RuntimeConfig", F::kImplemented, "logging.save_dir", ""},
      // ModelConfig
      {"num_device", "ModelConfig", F::kNotice, "", kResources},
      {"num_gpu", "ModelConfig", F::kNotice, "", kResources},
      {"num_cpu", "ModelConfig", F::kNotice, "", kResources},
      {"gpu_per_process", "ModelConfig", F::kNotice, "", kResources},
      {"cpu_per_process", "ModelConfig", F::kNotice, "", kResources},
      {"num_replica", "ModelConfig", F::kMapped, "parallel.num_trainers", "data-parallel trainers (-t)"},
      {"trainable", "ModelConfig", F::kNotice, "", "the policy is trained and the reference is frozen, always"},
      {"tensor_model_parallel_size", "ModelConfig", F::kImplemented, "parallel.tensor_parallel_size",
       "the policy trainer's tensor parallelism (--train-tp); the rollout engines' is --rollout-tp", {}, unset_if_null},
      {"pipeline_model_parallel_size", "ModelConfig", F::kImplemented, "parallel.pipeline_parallel_size",
       "the policy trainer's pipeline stages (--pp)", {}, unset_if_null},
      {"zero_size", "ModelConfig", F::kMapped, "parallel.zero_stage",
       "above 1: ZeRO-3 (parameters, gradients and AdamW state sharded) over all -t trainers", {}, zero_size_stage},
      {"model_config_file", "ModelConfig", F::kNotice, "", "the architecture comes from the model directory's config.json"},
      {"config_dir", "ModelConfig", F::kNotice, "", "the architecture comes from the model directory's config.json"},
      {"model_type", "ModelConfig", F::kNotice, "", "rlcpp runs LibTorch models; config.json's model_type decides"},
      {"offload_optimizer_states", "ModelConfig", F::kRefused, "", kOffload, {"false"}},
      {"sync_frequency", "ModelConfig", F::kImplemented, "staleness.sync_frequency", "rollout rounds between weight syncs"},
      {"offload_weights", "ModelConfig", F::kRefused, "", kOffload, {"false"}},
      {"free_grad_buffers", "ModelConfig", F::kRefused, "", kOffload, {"false"}},
      {"free_memory", "ModelConfig", F::kRefused, "", kOffload, {"false"}},
      {"args_dict", "ModelConfig", F::kNotice, "", "a placeholder for other arguments; rlcpp takes none there"},
      // LoraConfig (lora: block of a model)
      {"lora.enable_lora", "LoraConfig", F::kMapped, "model.enable_lora", "LoRA on (rank lora_dim) or off"},
      {"lora.part_module_name", "LoraConfig", F::kMapped, "model.lora_name_scope", "only layers whose name contains it"},
      {"lora.lora_dim", "LoraConfig", F::kMapped, "model.lora_rank", "LoRA rank r"},
      {"lora.lora_dropout", "LoraConfig", F::kMapped, "model.lora_dropout", ""},
      {"lora.lora_scaling", "LoraConfig", F::kMapped, "model.lora_scaling", "alpha = scaling x r (PEFT's lora_alpha)"},
      {"lora.lora_layer", "LoraConfig", F::kNotice, "",
       "adapters go on the linear layers --lora-target-modules names (all of them by default); embeddings are not adapted",
       {"ColumnParallelLinear,Embedding,LinearLayer,RowParallelLinear,VocabParallelEmbedding",
        "ColumnParallelLinear,LinearLayer,RowParallelLinear"}},
      {"lora.column_only_qkv", "LoraConfig", F::kMapped, "model.lora_target_modules",
       "true: adapters on q_proj, k_proj and v_proj only", {}, [](const Json& v, const std::string& where) {
         return read_bool(v, where) ? Json("q_proj,k_proj,v_proj") : Json(Json::value_t::discarded);
       }},
      // BatchGenerationConfig (batch_generation: block of a model)
      {"batch_generation.ranking", "BatchGenerationConfig", F::kImplemented, "rollout.ranking",
       "each round's prompts shortest first"},
      {"batch_generation.min_prompt_length", "BatchGenerationConfig", F::kImplemented, "rollout.min_prompt_length",
       "shorter prompts are skipped"},
  };
  return table;
}

const ChatLearnField* find_chatlearn_field(const std::string& key) {
  for (const auto& f : chatlearn_fields()) {
    if (f.name == key) return &f;
  }
  return nullptr;
}

std::string chatlearn_fields_markdown() {
  static const char* fates[] = {"implemented", "mapped", "refused", "accepted, notice"};
  std::string out = "| ChatLearn field | section | fate | rlcpp | note |\n|---|---|---|---|---|\n";
  for (const auto& f : chatlearn_fields()) {
    std::string target;
    if (const Setting* s = find_setting(f.setting)) {
      // The first flag as users type it: a multi-letter short name (declared "--tbs,...") takes one dash.
      const size_t comma = s->flags.find(',');
      std::string flag = s->flags.substr(0, comma);
      if (comma != std::string::npos && flag.rfind("--", 0) == 0) flag = flag.substr(1);
      target = fmt::format("`{}`", flag.empty() ? f.setting : flag);
    }
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", f.name, f.section, fates[static_cast<int>(f.fate)], target, f.note);
  }
  return out;
}

}  // namespace rlcpp
