// The table of run settings: one entry per setting with its YAML place, flags, help, how it is
// read into a RunConfig and how it is printed back. Enum settings take their names and help from
// the enum's table, so the help cannot list a name the parser rejects.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "rl/config/run_config.h"
#include "rl/config/setting_builders.h"
#include "rl/config/setting_choices.h"
#include "rl/config/setting_values.h"
#include "util/error.h"

namespace rlcpp {

namespace {

// A setting given in another unit (ChatLearn counts samples, the reference counts prompts):
// `samples` is converted with G and must agree with `prompts_name` when both are given.
Setting samples_setting(std::string name, std::string help, int64_t TrainOptions::*prompts, std::string prompts_name) {
  return make(name, "", {}, std::move(help),
          [name, prompts, prompts_name](RunConfig& c, const Json& v, const std::string& where, const RawSettings& raw) {
            const int64_t samples = read_int(v, where);
            at_least(samples, 1, where);
            if (samples % c.rollout.num_generations != 0) {
              throw_user_error("{}: {} samples is not a multiple of rollout.num_generations (-g) {}", where, samples,
                               c.rollout.num_generations);
            }
            const int64_t value = samples / c.rollout.num_generations;
            if (raw.values.contains(prompts_name) && c.train.*prompts != value) {
              throw_user_error("{} = {} samples means {} prompts of {} samples, but {} = {} prompts; give one of them",
                               where, samples, value, c.rollout.num_generations, raw.source.at(prompts_name), c.train.*prompts);
            }
            c.train.*prompts = value;
          },
          [prompts](const RunConfig& c) { return Json(c.train.*prompts * c.rollout.num_generations); }, false, prompts_name);
}

std::vector<Setting> make_settings() {
  using C = RunConfig;
  std::vector<Setting> s;
  // runtime
  s.push_back(string_setting("runtime.dataset", "-d,--dataset", "training JSONL ({\"messages\", \"gt_answer\"})",
                             [](C& c) -> std::string& { return c.runtime.dataset; }, {}));
  s.push_back(int_setting("runtime.num_episodes", "-e,--num-episodes", "passes over the dataset",
                          [](C& c) -> int64_t& { return c.runtime.num_episodes; }, 1, {}, true));
  s.push_back(int_setting("runtime.max_steps", "--max-steps", "stop after N steps (0: the episodes decide)",
                          [](C& c) -> int64_t& { return c.runtime.max_steps; }, 0, {}, true));
  s.push_back(int_setting("runtime.seed", "--seed", "data order and sampling seed",
                          [](C& c) -> uint64_t& { return c.runtime.seed; }, 0));
  s.push_back(string_setting("runtime.device", "--device", "cpu | cuda | cuda:N",
                             [](C& c) -> std::string& { return c.runtime.device; }, {}, true));
  s.push_back(make("runtime.dtype", "--dtype", {}, "weights and compute: " + dtypes().names(),
                   [](C& c, const Json& v, const std::string& where, const RawSettings&) {
                     c.runtime.dtype = dtypes().name(dtypes().parse(read_string(v, where), where));
                   },
                   [](const C& c) { return Json(c.runtime.dtype); }, false));
  s.push_back(string_setting("runtime.resume", "--resume", "auto: continue from the run's newest checkpoint",
                             [](C& c) -> std::string& { return c.runtime.resume; }, {}, true));
  s.push_back(string_setting("runtime.checkpoint_path", "--cp,--checkpoint-path", "resume from this step-N (or run) directory",
                             [](C& c) -> std::string& { return c.runtime.checkpoint_path; }, {}, true));
  s.push_back(bool_setting("runtime.enable_resume_training", "--enable-resume-training",
                           "resume when a checkpoint path is set (ChatLearn)",
                           [](C& c) -> bool& { return c.runtime.enable_resume_training; }, {}, true));
  s.push_back(int_setting("runtime.resume_step", "--resume-step", "resume from step-N of -cp's run directory (0: its latest)",
                          [](C& c) -> int64_t& { return c.runtime.resume_step; }, 0, {}, true));
  s.push_back(bool_setting("runtime.skip_bad_lines", "--skip-bad-lines",
                           "skip malformed dataset lines with a count instead of stopping",
                           [](C& c) -> bool& { return c.runtime.skip_bad_lines; }));
  s.push_back(int_setting("runtime.consumed_samples", "--consumed-samples",
                          "a fresh run first skips this many prompts of the shuffled data order",
                          [](C& c) -> int64_t& { return c.runtime.consumed_samples; }, 0));
  // parallel
  s.push_back(int_setting("parallel.num_trainers", "-t,--num-trainers",
                          "trainer processes (mpirun -np T+I; ranks [0,T) train data-parallel)",
                          [](C& c) -> int64_t& { return c.parallel.num_trainers; }, 0, {}, true));
  s.push_back(int_setting("parallel.num_inferencers", "-i,--num-inferencer",
                          "rollout processes (ranks [T,T+I)); 0: colocated in one process",
                          [](C& c) -> int64_t& { return c.parallel.num_inferencers; }, 0, {}, true));
  s.push_back(int_setting("parallel.reward_ranks", "--reward-ranks",
                          "ranks of their own that hold --reward-model and score the rollout engines' responses "
                          "(mpirun -np T+I+R; engine e is served by reward rank e mod R); 0: each engine's first rank "
                          "loads the reward model",
                          [](C& c) -> int64_t& { return c.parallel.reward_ranks; }, 0, {"reward_num_nodes"}, true));
  s.push_back(int_setting("parallel.sync_bucket_mb", "--sync-bucket-mb", "weight-sync bucket size (MiB)",
                          [](C& c) -> int64_t& { return c.parallel.sync_bucket_mb; }, 1, {}, true));
  s.push_back(enum_setting("parallel.param_sync_comm_type", "--param-sync-comm-type",
                           "how trainer rank 0 sends weights to the rollout workers", sync_modes(),
                           [](C& c) -> SyncMode& { return c.parallel.param_sync_comm_type; }, true));
  s.push_back(bool_setting("parallel.verify_sync", "--verify-sync",
                           "rollout workers hash the weights they applied and trainer rank 0 checks them",
                           [](C& c) -> bool& { return c.parallel.verify_sync; }, {}, true));
  s.push_back(double_setting("parallel.comm_timeout", "--comm-timeout",
                             "seconds a rank may wait in one MPI operation (a collective, a send, a receive) before it "
                             "ends the job naming the rank it waited on: a stopped, hung or lost rank (0: wait for ever)",
                             [](C& c) -> double& { return c.parallel.comm_timeout; }, kNonNegative, {}, true));
  // Not to change on resume: the optimizer state is saved per tensor-parallel part (a resume
  // re-shards it over any --pp, ZeRO stage and trainer count, by name).
  s.push_back(int_setting("parallel.tensor_parallel_size", "--tp,--train-tp,--tensor-parallel-size",
                          "trainer tensor parallelism: each data-parallel replica is this many trainer ranks (-t counts "
                          "ranks; the colocated mode: mpirun -np N with --train-tp N)",
                          [](C& c) -> int64_t& { return c.parallel.tp; }, 1, {"train_tp"}));
  s.push_back(int_setting("parallel.pipeline_parallel_size", "--pp,--pipeline-parallel-size",
                          "pipeline stages of each trainer replica (1F1B over -tmbs micro-batches; the colocated mode: "
                          "mpirun -np N with --train-tp x --pp = N)",
                          [](C& c) -> int64_t& { return c.parallel.pp; }, 1, {"train_pp"}, true));
  s.push_back(enum_setting("parallel.pp_balance", "--pp-balance", "what --pp balances the stages' layers by",
                           stage_balances(), [](C& c) -> StageBalance& { return c.parallel.pp_balance; }, true));
  s.push_back(int_setting("parallel.zero_stage", "--zero,--zero-stage",
                          "ZeRO over the data-parallel trainers: 1 shards the AdamW moments, 2 also the gradients, 3 also the "
                          "weights (train: -t T -i I; sft and train-rm: under mpirun -np N)",
                          [](C& c) -> int64_t& { return c.parallel.zero; }, 0, {}, true));
  // ColossalChat's plugin_config dict (rl_example.py): its keys map onto the settings above.
  s.push_back(make(
      "parallel.plugin_config", "--plugin-config",  {},
      "ColossalChat's plugin_config as JSON, e.g. '{\"zero_stage\": 1, \"tp_size\": 1, \"max_norm\": 1.0}'",
      [](RunConfig& c, const Json& v, const std::string& where, const RawSettings& raw) {
        if (v.is_null() || (v.is_string() && (v.get<std::string>().empty() || v.get<std::string>() == "null"))) return;
        Json map = v;  // printed configurations show it as null: its keys are printed as their settings
        if (v.is_string()) map = Json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (!map.is_object()) {
          throw_user_error("{}: expected a map such as '{{\"zero_stage\": 1}}', got {}", where, scalar_text(v));
        }
        // key -> (the setting it stands for, where its value goes)
        const std::vector<std::pair<std::string, std::string>> known = {{"zero_stage", "parallel.zero_stage"},
                                                                        {"tp_size", "parallel.tensor_parallel_size"},
                                                                        {"pp_size", "parallel.pipeline_parallel_size"},
                                                                        {"max_norm", "train.max_grad_norm"}};
        for (const auto& [key, value] : map.items()) {
          const std::string at = where + " " + key;
          if (key == "microbatch_size") continue;  // pipeline micro-batches: pp_size must be 1 (checked there)
          auto it = std::find_if(known.begin(), known.end(), [&](const auto& k) { return k.first == key; });
          if (it == known.end()) {
            throw_user_error("{}: rlcpp does not know plugin_config key \"{}\" (known: zero_stage, tp_size, pp_size, "
                             "max_norm, microbatch_size)", where, key);
          }
          if (raw.values.contains(it->second)) {
            throw_user_error("{} and {} both set {}: give it once", at, raw.source.at(it->second), it->second);
          }
          if (key == "max_norm") {
            c.train.optimizer.max_grad_norm = read_double(value, at);
            if (!(c.train.optimizer.max_grad_norm >= 0)) throw_user_error("{}: must be >= 0", at);
          } else {
            const int64_t x = read_int(value, at);
            (key == "zero_stage" ? c.parallel.zero : key == "tp_size" ? c.parallel.tp : c.parallel.pp) = x;
          }
        }
      },
      [](const RunConfig&) { return Json(); }, true));
  s.push_back(int_setting("parallel.producer_tensor_parallel_size", "--ptp,--rollout-tp,--producer-tensor-parallel-size",
                          "rollout tensor parallelism: each engine is this many rollout ranks (-i counts ranks)",
                          [](C& c) -> int64_t& { return c.parallel.ptp; }, 1, {"rollout_tp", "tensor_parallel_size"}, true));
  s.push_back(string_setting("parallel.master_address", "--master_address,--master-address",
                             "rendezvous address (not used: mpirun provides it)",
                             [](C& c) -> std::string& { return c.parallel.master_address; }, {}, true));
  s.push_back(int_setting("parallel.master_port", "--master_port,--master-port", "rendezvous port (not used: mpirun provides it)",
                          [](C& c) -> int64_t& { return c.parallel.master_port; }, 0, {}, true));
  // staleness
  s.push_back(int_setting("staleness.sync_frequency", "--sync-frequency", "rollout rounds between weight syncs",
                          [](C& c) -> int64_t& { return c.staleness.sync_frequency; }, 1, {}, true));
  s.push_back(int_setting("staleness.n_behind", "--nb,--n-behind", "rounds rollout may run ahead of training (rollout workers, or rollout servers with -b)",
                          [](C& c) -> int64_t& { return c.staleness.n_behind; }, 0, {}, true));
  s.push_back(int_setting("staleness.max_staleness", "--max-staleness",
                          "train a sample at most K policy versions after the oldest policy that sampled it; the "
                          "schedule (-ibs, -tbs, -nb, --sync-frequency) must keep within it (with --partial-rollout, "
                          "the round it generates alongside), and --stale-policy says what becomes of what goes over "
                          "it (-1: no bound)",
                          [](C& c) -> int64_t& { return c.staleness.max_staleness; }, -1, {"max_head_offpolicyness"}, true));
  s.push_back(bool_setting("staleness.partial_rollout", "--partial-rollout",
                           "a round generated ahead (-nb 1) takes each new policy version in the middle of its "
                           "sequences; every token records the version that sampled it",
                           [](C& c) -> bool& { return c.staleness.partial_rollout; }, {"use_partial_rollout"}, true));
  s.push_back(int_setting("staleness.switch_interval", "--switch-interval",
                          "partial rollouts: engine steps between the versions a round takes (0: -mnt per generate call of -imbs prompts and "
                          "per wave of --max-num-seqs sequences in it, over versions + 1)",
                          [](C& c) -> int64_t& { return c.staleness.switch_interval; }, 0, {}, true));
  s.push_back(enum_setting("staleness.async_switch", "--async-switch", "partial rollouts: when new weights are taken",
                           switch_modes(), [](C& c) -> bool& { return c.staleness.switch_asap; }, true));
  s.push_back(enum_setting("staleness.stale_policy", "--stale-policy", "what --max-staleness no longer allows",
                           stale_policies(), [](C& c) -> bool& { return c.staleness.stale_finish; }, true));
  s.push_back(enum_setting("staleness.partial_kv", "--partial-kv", "partial rollouts: the cache across a weight switch",
                           partial_kv_modes(), [](C& c) -> bool& { return c.staleness.recompute_kv; }, true));
  s.push_back(bool_setting("staleness.stream_prompts", "--stream-prompts",
                           "partial rollouts over rollout workers: the next round's prompts start in the sequence slots "
                           "(--max-num-seqs) a round leaves free, and go on when their round is sent",
                           [](C& c) -> bool& { return c.staleness.stream_prompts; }, {}, true));
  s.push_back(enum_setting("staleness.group_order", "--group-order",
                           "with --stream-prompts: which groups a round delivers to the trainers",
                           group_orders(), [](C& c) -> bool& { return c.staleness.completion_order; }, true));
  s.push_back(enum_setting("staleness.checkpoint_round", "--checkpoint-round",
                           "partial rollouts over rollout workers (or servers, single-turn): the round generating ahead at a checkpoint",
                           checkpoint_round_modes(), [](C& c) -> bool& { return c.staleness.cut_at_checkpoint; }, true));
  s.push_back(int_setting("staleness.max_relay_episode", "--max-relay-episode",
                          "relay buffer: the rollouts of the last N steps are trained on again with each step (-1: all, 0: off)",
                          [](C& c) -> int64_t& { return c.staleness.max_relay_episode; }, -1));
  s.push_back(int_setting("staleness.relay_episode_offset", "--relay-episode-offset",
                          "relayed rollouts join the steps after this many steps",
                          [](C& c) -> int64_t& { return c.staleness.relay_episode_offset; }, 0));
  // model
  s.push_back(string_setting("model.path", "-m,--model", "Hugging Face model directory",
                             [](C& c) -> std::string& { return c.model.path; }, {"model"}));
  s.push_back(int_setting("model.lora_rank", "--lora-rank",
                          "LoRA rank r: train adapters on the frozen base instead of every weight (0: off)",
                          [](C& c) -> int64_t& { return c.model.lora.rank; }, 0, {"lora_dim"}));
  s.push_back(make("model.enable_lora", "--lora", {}, "LoRA on (rank 8 unless --lora-rank) or off (ChatLearn's enable_lora)",
                   [](C& c, const Json& v, const std::string& where, const RawSettings&) { c.model.enable_lora = read_bool(v, where); },
                   [](const C& c) { return Json(c.model.lora.enabled()); }, false));
  s.push_back(double_setting("model.lora_alpha", "--lora-alpha", "LoRA alpha: scaling = alpha / r (0: alpha = r)",
                             [](C& c) -> double& { return c.model.lora.alpha; }, kNonNegative));
  s.push_back(make("model.lora_scaling", "", {}, "LoRA scaling (ChatLearn's): alpha = scaling x r",
                   [](C& c, const Json& v, const std::string& where, const RawSettings&) {
                     c.model.lora_scaling = read_double(v, where);
                     if (!(c.model.lora_scaling > 0)) throw_user_error("{}: {} must be > 0", where, c.model.lora_scaling);
                   },
                   [](const C& c) { return Json(c.model.lora.scaling()); }, false, "model.lora_alpha"));
  s.push_back(double_setting("model.lora_dropout", "--lora-dropout", "dropout on the adapters' input in training",
                             [](C& c) -> double& { return c.model.lora.dropout; }, Bounds{0, 1, false, true}));
  s.push_back(make("model.lora_target_modules", "--lora-target-modules", {},
                   "linear layers that get adapters: all-linear, or a comma-separated list of " +
                       fmt::format("{}", fmt::join(lora_module_names(), ",")),
                   [](C& c, const Json& v, const std::string& where, const RawSettings&) {
                     std::string text = v.is_array() ? "" : read_string(v, where);
                     if (v.is_array()) {
                       for (const auto& t : v) text += (text.empty() ? "" : ",") + read_string(t, where);
                     }
                     c.model.lora.targets = parse_lora_targets(text, where);
                   },
                   [](const C& c) { return Json(lora_targets_text(c.model.lora.targets)); }, false));
  s.push_back(string_setting("model.lora_name_scope", "--lora-name-scope",
                             "only layers whose name contains this get adapters (ChatLearn's part_module_name)",
                             [](C& c) -> std::string& { return c.model.lora.name_scope; }));
  s.push_back(dtype_setting("model.frozen_dtype", "--frozen-dtype",
                            "dtype frozen weights are stored in (LoRA's base, the reference model), computed in --dtype: " +
                                dtypes().names() + " (default: --dtype)",
                            [](C& c) -> std::string& { return c.model.frozen_dtype; }));
  // rollout
  s.push_back(int_setting("rollout.kv_cache_mb", "--kv-cache-mb", "KV cache budget (MiB)",
                          [](C& c) -> int64_t& { return c.rollout.engine.kv_cache_mb; }, 1, {}, true));
  const std::vector<torch::ScalarType> kv_dtypes = {torch::kFloat32, torch::kBFloat16, torch::kFloat16};
  s.push_back(dtype_setting("rollout.dtype", "--rollout-dtype",
                            "dtype of the weights the engine generates with: " + rlcpp::rollout_dtypes().names(", ") +
                                " (default: --dtype). Another than --dtype: the engine keeps its own copy, refreshed "
                                "after each update (half precision and 8 bits, with a scale per output channel, are "
                                "computed in fp32 by the CPU kernels); --tis-cap and --is-mask-high correct the "
                                "rollout/trainer mismatch this makes",
                            [](C& c) -> std::string& { return c.rollout.dtype; }, {}, true, rlcpp::rollout_dtypes()));
  s.push_back(dtype_setting("rollout.kv_cache_dtype", "--kv-cache-dtype",
                            "dtype of the engine's KV cache: float32, bfloat16 or float16 (default: the engine's "
                            "compute dtype)",
                            [](C& c) -> std::string& { return c.rollout.kv_cache_dtype; }, kv_dtypes, true));
  s.push_back(int_setting("rollout.max_num_seqs", "--max-num-seqs", "sequences the engine runs at once (vLLM's max_num_seqs)",
                          [](C& c) -> int64_t& { return c.rollout.engine.scheduler.max_num_seqs; }, 1, {}, true));
  s.push_back(int_setting("rollout.max_num_batched_tokens", "--max-num-batched-tokens",
                          "tokens per engine step (vLLM's max_num_batched_tokens): with chunked prefill, one token of "
                          "each decoding sequence plus prompt chunks; without, the prompts of a prefill step",
                          [](C& c) -> int64_t& { return c.rollout.engine.scheduler.max_num_batched_tokens; }, 1, {}, true));
  s.push_back(bool_setting("rollout.enable_chunked_prefill", "--enable-chunked-prefill",
                           "prefill prompts in chunks mixed into the decode steps, so a long prompt never stalls the "
                           "running sequences (vLLM's enable_chunked_prefill; false: whole prompts in steps of their own)",
                           [](C& c) -> bool& { return c.rollout.engine.scheduler.chunked_prefill; }, {}, true));
  s.push_back(int_setting("rollout.num_generations", "-g,--num-generations", "samples per prompt (G)",
                          [](C& c) -> int64_t& { return c.rollout.num_generations; }, 1, {"num_inference_per_prompt"}));
  s.push_back(int_setting("rollout.inference_batch_size", "--ibs,--inference-batch-size",
                          "prompts per rollout round per rollout worker (0: -tbs); may change on resume with -i",
                          [](C& c) -> int64_t& { return c.rollout.inference_batch_size; }, 0, {}, true));
  s.push_back(int_setting("rollout.inference_microbatch_size", "--imbs,--inference-microbatch-size",
                          "prompts per generate call (0: the whole round)",
                          [](C& c) -> int64_t& { return c.rollout.inference_microbatch_size; }, 0, {}, true));
  s.push_back(double_setting("rollout.temperature", "--temp,--temperature", "sampling temperature",
                             [](C& c) -> double& { return c.rollout.sampling.temperature; }, kNonNegative));
  s.push_back(int_setting("rollout.top_k", "--topk,--top-k", "0: off", [](C& c) -> int64_t& { return c.rollout.sampling.top_k; }, 0));
  s.push_back(double_setting("rollout.top_p", "--topp,--top-p", "1: off", [](C& c) -> double& { return c.rollout.sampling.top_p; }, Bounds{0, 1, true}));
  s.push_back(int_setting("rollout.max_new_tokens", "--mnt,--max-new-tokens", "response length cap",
                          [](C& c) -> int64_t& { return c.rollout.sampling.max_new_tokens; }, 1));
  s.push_back(int_setting("rollout.max_prompt_tokens", "--mpt,--max-prompt-tokens", "prompt length cap (0: none)",
                          [](C& c) -> int64_t& { return c.rollout.max_prompt_tokens; }, 0));
  s.push_back(enum_setting("rollout.overflow", "--overflow",
                           "a prompt over -mpt (or the model's max_position_embeddings less one)", prompt_overflows(),
                           [](C& c) -> PromptOverflow& { return c.rollout.overflow; }));
  s.push_back(make("rollout.system_prompt", "-s,--system-prompt", {}, "system prompt (default: the reward type's)",
               [](C& c, const Json& v, const std::string& where, const RawSettings&) {
                 if (v.is_null()) c.rollout.system_prompt.reset();
                 else c.rollout.system_prompt = read_string(v, where);
               },
               [](const C& c) { return c.rollout.system_prompt ? Json(*c.rollout.system_prompt) : Json(nullptr); }, false));
  s.push_back(bool_setting("rollout.ranking", "--ranking", "generate each round's prompts shortest first",
                           [](C& c) -> bool& { return c.rollout.ranking; }, {}));
  s.push_back(int_setting("rollout.min_prompt_length", "--min-prompt-length", "skip prompts with fewer tokens",
                          [](C& c) -> int64_t& { return c.rollout.min_prompt_length; }, 0, {}));
  // remote
  s.push_back(enum_setting("remote.backend", "-b,--backend", "where rollouts come from", rollout_backend_kinds(),
                           [](C& c) -> RolloutBackendKind& { return c.remote.backend; }, true));
  s.push_back(string_setting("remote.rollout_url", "--rollout-url",
                             "-b openai|vllm|sglang: the OpenAI-compatible servers, http://HOST:PORT[,http://HOST:PORT...]",
                             [](C& c) -> std::string& { return c.remote.url; }, {}, true));
  s.push_back(string_setting("remote.rollout_model", "--rollout-model",
                             "the servers' name of the base model (default: the first of their /v1/models)",
                             [](C& c) -> std::string& { return c.remote.model; }, {}, true));
  s.push_back(string_setting("remote.rollout_weights_dir", "--rollout-weights-dir",
                             "where the trainer writes the policy for the servers to load (a path they can read; "
                             "default: the run directory's rollout-weights/)",
                             [](C& c) -> std::string& { return c.remote.weights_dir; }, {}, true));
  s.push_back(double_setting("remote.rollout_timeout", "--rollout-timeout",
                             "seconds a server has for one prompt's samples before they are asked of another; with every server "
                             "down that long the run stops",
                             [](C& c) -> double& { return c.remote.timeout; }, kPositive, {}, true));
  s.push_back(int_setting("remote.rollout_concurrency", "--rollout-concurrency", "prompts in flight at one server",
                          [](C& c) -> int64_t& { return c.remote.concurrency; }, 1, {}, true));
  add_reward_settings(s);
  // episode: multi-turn rollouts
  s.push_back(string_setting("episode.tools", "--tools",
                             "multi-turn with tools the model may call: python,calculator (built in), or a JSON file of "
                             "OpenAI-style function schemas naming them; declared through the chat template's tools",
                             [](C& c) -> std::string& { return c.episode.tools; }));
  s.push_back(string_setting("episode.env_cmd", "--env-cmd",
                             "multi-turn with an external environment: a command speaking JSON lines (start, step, end)",
                             [](C& c) -> std::string& { return c.episode.env_cmd; }));
  s.push_back(int_setting("episode.env_workers", "--env-workers", "copies of the --env-cmd command (episodes spread over them)",
                          [](C& c) -> int64_t& { return c.episode.env_workers; }, 1, {}, true));
  s.push_back(int_setting("episode.max_turns", "--max-turns", "assistant turns per trajectory",
                          [](C& c) -> int64_t& { return c.episode.max_turns; }, 1));
  s.push_back(int_setting("episode.max_tool_calls", "--max-tool-calls", "tool calls per trajectory",
                          [](C& c) -> int64_t& { return c.episode.max_tool_calls; }, 0));
  s.push_back(int_setting("episode.max_tokens_per_turn", "--max-tokens-per-turn",
                          "tokens of one assistant turn (0: the response budget -mnt, which counts every turn and "
                          "the inserted tokens)",
                          [](C& c) -> int64_t& { return c.episode.max_tokens_per_turn; }, 0));
  s.push_back(double_setting("episode.tool_timeout", "--tool-timeout",
                             "seconds one tool call (or environment reply) may take",
                             [](C& c) -> double& { return c.episode.tool_timeout; }, kPositive));
  s.push_back(int_setting("episode.max_tool_output", "--max-tool-output", "tokens of one tool answer kept (the rest cut)",
                          [](C& c) -> int64_t& { return c.episode.max_tool_output; }, 1));
  s.push_back(enum_setting("episode.env_reward", "--env-reward", "with --env-cmd, the trajectory's reward",
                           env_reward_modes(), [](C& c) -> bool& { return c.episode.env_reward_add; }));
  s.push_back(int_setting("episode.tool_overlap_steps", "--tool-overlap-steps",
                          "engine steps the others decode while a turn's tools run (it resumes at that step, waiting "
                          "there if they are not done: the schedule never depends on a tool's time)",
                          [](C& c) -> int64_t& { return c.episode.resume_lag; }, 1));
  s.push_back(string_setting("episode.tool_format", "--tool-format",
                             "how the model writes tool calls: hermes (<tool_call>, Qwen) or llama3 (default: from the "
                             "chat template)",
                             [](C& c) -> std::string& { return c.episode.tool_format; }));
  // algorithm: the preset first, then single settings over it
  s.push_back(make("algorithm.algo", "-a,--algo", {}, "preset: " + algo_preset_names() + "\n" + algo_preset_help(),
               [](C& c, const Json& v, const std::string& where, const RawSettings&) { c.algo = algo_preset(read_string(v, where), where); },
               [](const C& c) { return Json(c.algo.name); }, false));
  s.push_back(double_setting("algorithm.kl_coeff", "--kl,--kl-coeff", "KL coefficient β (default: the preset's)",
                             [](C& c) -> double& { return c.algo.loss.kl_coef; }, kNonNegative));
  s.push_back(double_setting("algorithm.clip_eps_low", "--clip-eps-low", "ratio floor 1 - eps",
                             [](C& c) -> double& { return c.algo.loss.clip_eps_low; }, Bounds{0, 1, false, true}));
  s.push_back(double_setting("algorithm.clip_eps_high", "--clip-eps-high", "ratio ceiling 1 + eps",
                             [](C& c) -> double& { return c.algo.loss.clip_eps_high; }, kNonNegative));
  s.push_back(make("algorithm.dual_clip", "--dual-clip", {"clip_ratio_c"},
                   "dual clip C > 1: a negative-advantage token's loss is capped at -C·A (clip_ratio_c; 0: off)",
                   [](C& c, const Json& v, const std::string& where, const RawSettings&) {
                     const double x = v.is_null() ? 0.0 : read_double(v, where);
                     if (x != 0 && !(x > 1)) throw_user_error("{}: {} must exceed 1 (0: off)", where, x);
                     c.algo.loss.clip_ratio_c = x == 0 ? std::nullopt : std::optional<double>(x);
                   },
                   [](const C& c) { return Json(c.algo.loss.clip_ratio_c.value_or(0.0)); }, false));
  s.push_back(enum_setting("algorithm.ratio_level", "--ratio-level", "importance ratio of the clipped loss",
                           importance_levels(), [](C& c) -> ImportanceLevel& { return c.algo.loss.ratio_level; }));
  s.push_back(double_setting("algorithm.skip_threshold", "--skip-threshold",
                             "leave out samples whose ratio (--skip-mode) exceeds it, from the loss and its denominators (0: off)",
                             [](C& c) -> double& { return c.algo.loss.skip_threshold; }, kNonNegative));
  s.push_back(enum_setting("algorithm.skip_mode", "--skip-mode", "the ratio the skip threshold compares", skip_modes(),
                           [](C& c) -> SkipMode& { return c.algo.loss.skip_mode; }));
  s.push_back(double_setting("algorithm.entropy_coeff", "--entropy-coeff",
                             "entropy bonus coefficient (0: off; keeps the response tokens' logits for the backward pass)",
                             [](C& c) -> double& { return c.algo.loss.entropy_coef; }, kNonNegative, {"entropy_coef"}));
  s.push_back(double_setting("algorithm.tis_cap", "--tis-cap",
                             "truncated importance sampling: weight the loss by min(π_old / π_rollout, cap) (0: off)",
                             [](C& c) -> double& { return c.algo.loss.tis_cap; }, kNonNegative));
  s.push_back(enum_setting("algorithm.tis_level", "--tis-level", "where the TIS weight is taken", importance_levels(),
                           [](C& c) -> ImportanceLevel& { return c.algo.loss.tis_level; }));
  s.push_back(double_setting("algorithm.is_mask_high", "--is-mask-high",
                             "masked importance sampling (IcePop): tokens whose π_old / π_rollout exceeds it add nothing to the loss (0: off)",
                             [](C& c) -> double& { return c.algo.loss.is_mask_high; }, kNonNegative, {"rollout_is_threshold"}));
  s.push_back(double_setting("algorithm.is_mask_low", "--is-mask-low",
                             "with --is-mask-high: tokens whose π_old / π_rollout falls below it add nothing to the loss (0: no floor)",
                             [](C& c) -> double& { return c.algo.loss.is_mask_low; }, kNonNegative, {"rollout_is_threshold_lower"}));
  s.push_back(enum_setting("algorithm.is_mask_level", "--is-mask-level",
                           "where the masked band is taken: each token's ratio, or each sample's geometric-mean ratio",
                           importance_levels(), [](C& c) -> ImportanceLevel& { return c.algo.loss.is_mask_level; }));
  s.push_back(double_setting("algorithm.adv_eps", "--adv-eps", "added to the group std of GRPO advantages",
                             [](C& c) -> double& { return c.algo.advantage.eps; }, kNonNegative));
  s.push_back(enum_setting("algorithm.adv_std", "--adv-std", "the group std of GRPO advantages", std_estimates(),
                           [](C& c) -> bool& { return c.algo.advantage.std_unbiased; }));
  s.push_back(enum_setting("algorithm.loss_variation", "--loss-variation", "loss aggregation", loss_aggregations(),
                           [](C& c) -> LossAggregation& { return c.algo.loss.aggregation; }));
  s.push_back(enum_setting("algorithm.advantage_estimator", "--advantage-estimator", "", advantage_estimators(),
                           [](C& c) -> AdvantageEstimator& { return c.algo.advantage.estimator; }));
  s.push_back(enum_setting("algorithm.kl_estimator", "--kl-estimator", "KL penalty estimator", kl_estimators(),
                           [](C& c) -> KlEstimator& { return c.algo.loss.kl_estimator; }));
  s.push_back(double_setting("algorithm.kl_clamp", "--kl-clamp", "k3 values are clamped to ±this",
                             [](C& c) -> double& { return c.algo.loss.kl_clamp; }, kPositive));
  s.push_back(make("algorithm.filter_range", "--filter-range", {}, "keep groups whose accuracy is strictly between low and high, an open interval (none: off)",
               [](C& c, const Json& v, const std::string& where, const RawSettings&) { c.algo.filter_range = read_range(v, where); },
               [](const C& c) {
                 return c.algo.filter_range ? Json::array({c.algo.filter_range->first, c.algo.filter_range->second})
                                            : Json(nullptr);
               },
               false));
  s.push_back(bool_setting("algorithm.dynamic_batching", "--dynamic-batching", "generate until -tbs groups are kept",
                           [](C& c) -> bool& { return c.algo.dynamic_batching; }));
  s.push_back(int_setting("algorithm.max_dynamic_rounds", "--max-dynamic-rounds", "extra rounds per step under dynamic batching",
                          [](C& c) -> int64_t& { return c.algo.max_dynamic_rounds; }, 0));
  s.push_back(bool_setting("algorithm.require_full_batch", "--require-full-batch",
                           "under dynamic batching, stop the run when a step still has fewer than -tbs groups after "
                           "--max-dynamic-rounds (default: train on what there is, with a warning)",
                           [](C& c) -> bool& { return c.algo.require_full_batch; }));
  s.push_back(bool_setting("algorithm.soft_over_length_punishment", "--soft-over-length-punishment",
                           "DAPO's soft over-length penalty", [](C& c) -> bool& { return c.algo.overlong_shaping; }));
  s.push_back(int_setting("algorithm.cache_length", "--cache-length", "L_cache of the penalty (0: min(1024, mnt/4))",
                          [](C& c) -> int64_t& { return c.algo.overlong_cache; }, 0));
  s.push_back(bool_setting("algorithm.filter_truncated_response", "--filter-truncated-response",
                           "truncated responses leave the loss", [](C& c) -> bool& { return c.algo.filter_truncated; }));
  s.push_back(double_setting("algorithm.gamma", "--gamma", "-a PPO: GAE's discount per generated token",
                             [](C& c) -> double& { return c.algo.ppo.gamma; }, kFraction));
  s.push_back(double_setting("algorithm.lam", "--lam", "-a PPO: GAE's lambda",
                             [](C& c) -> double& { return c.algo.ppo.lam; }, kFraction, {"lambd"}));
  s.push_back(double_setting("algorithm.value_clip", "--value-clip",
                             "-a PPO: the value loss clips the critic's value to the old value ± this (0: unclipped)",
                             [](C& c) -> double& { return c.algo.ppo.value_clip; }, kNonNegative, {"cliprange_value"}));
  s.push_back(bool_setting("algorithm.kl_in_reward", "--kl-in-reward",
                           "-a PPO: the KL to the reference (k1 x --kl-coeff) is a per-token reward penalty, in place of "
                           "the loss term (the classic RLHF recipe; verl's use_kl_in_reward)",
                           [](C& c) -> bool& { return c.algo.ppo.kl_in_reward; }, {"use_kl_in_reward"}));
  // train
  s.push_back(int_setting("train.train_batch_size", "--tbs,--train-batch-size", "prompts per step",
                          [](C& c) -> int64_t& { return c.train.train_batch_size; }, 1));
  s.push_back(samples_setting("train.sample_per_episode", "samples per step (ChatLearn): -tbs × G", &TrainOptions::train_batch_size,
                              "train.train_batch_size"));
  s.push_back(int_setting("train.train_minibatch_size", "--tMbs,--train-minibatch-size", "prompts per optimizer step",
                          [](C& c) -> int64_t& { return c.train.train_minibatch_size; }, 1));
  s.push_back(samples_setting("train.train_global_batch_size", "samples per optimizer step (ChatLearn): -tMbs × G",
                              &TrainOptions::train_minibatch_size, "train.train_minibatch_size"));
  s.push_back(int_setting("train.train_microbatch_size", "--tmbs,--train-microbatch-size", "samples per forward/backward",
                          [](C& c) -> int64_t& { return c.train.train_microbatch_size; }, 1, {}));
  s.push_back(int_setting("train.max_tokens_per_micro_batch", "--max-tokens-per-micro-batch",
                          "> 0: each forward/backward takes as many samples as fit in this many tokens (a longer "
                          "sample alone), in place of -tmbs (verl's ppo_max_token_len_per_gpu with use_dynamic_bsz)",
                          [](C& c) -> int64_t& { return c.train.max_tokens_per_micro_batch; }, 0,
                          {"ppo_max_token_len_per_gpu"}, true));
  s.push_back(bool_setting("train.padding_free", "--padding-free",
                           "each micro-batch is one row of its samples back to back, each attending to its own "
                           "tokens only (no padding; verl's use_remove_padding, OpenRLHF's --packing_samples); "
                           "false: right-padded rows [samples, longest]",
                           [](C& c) -> bool& { return c.train.padding_free; }, {"use_remove_padding", "packing_samples"},
                           true));
  s.push_back(int_setting("train.num_training_epoch", "--num-training-epoch", "passes over each step's rollouts",
                          [](C& c) -> int64_t& { return c.train.num_training_epoch; }, 1));
  s.push_back(bool_setting("train.reuse_rollout_logprobs", "--reuse-rollout-logprobs",
                           "when a step is on-policy (one epoch, one mini-batch, no staleness or relay, rollout weights "
                           "and KV cache in the training dtype), use the sampler's log-probs as the old ones and skip "
                           "the scoring pass (false: always recompute them)",
                           [](C& c) -> bool& { return c.train.reuse_rollout_logprobs; }, {}, true));
  s.push_back(bool_setting("train.gradient_checkpointing", "--gradient-checkpointing",
                           "keep only each decoder layer's input in training and recompute the rest in backward",
                           [](C& c) -> bool& { return c.train.gradient_checkpointing; }, {}, true));
  s.push_back(double_setting("train.learning_rate", "--lr,--learning-rate", "AdamW learning rate",
                             [](C& c) -> double& { return c.train.optimizer.lr; }, kNonNegative));
  s.push_back(double_setting("train.weight_decay", "--weight-decay", "AdamW weight decay",
                             [](C& c) -> double& { return c.train.optimizer.weight_decay; }, kNonNegative));
  s.push_back(double_setting("train.max_grad_norm", "--max-grad-norm", "gradient clipping (0: off)",
                             [](C& c) -> double& { return c.train.optimizer.max_grad_norm; }, kNonNegative));
  s.push_back(enum_setting("train.lr_schedule", "--lr-schedule", "decay after warm-up", lr_schedules(),
                           [](C& c) -> LrSchedule& { return c.train.optimizer.lr_schedule; }));
  s.push_back(int_setting("train.warmup_steps", "--warmup-steps", "linear warm-up optimizer steps",
                          [](C& c) -> int64_t& { return c.train.optimizer.warmup_steps; }, 0));
  s.push_back(int_setting("train.max_nonfinite_steps", "--max-nonfinite-steps",
                          "stop after this many consecutive steps whose gradient is not finite (each is skipped)",
                          [](C& c) -> int64_t& { return c.train.max_nonfinite_steps; }, 1));
  s.push_back(double_setting("train.center_rewards_coefficient", "--center-rewards-coefficient",
                             "rlcpp train-rm: adds coef x (chosen + rejected)^2 per pair, keeping scores centred on 0 "
                             "(TRL's center_rewards_coefficient; 0: off)",
                             [](C& c) -> double& { return c.train.preference.center_coef; }, kNonNegative));
  s.push_back(string_setting("train.critic_model", "--critic-model",
                             "-a PPO: the critic's starting point, a reward model or a causal LM given a fresh value head "
                             "(default: --reward-model if given, else -m)",
                             [](C& c) -> std::string& { return c.train.critic.model; }, {"critic_pretrain"}));
  s.push_back(double_setting("train.critic_learning_rate", "--critic-lr", "-a PPO: the critic's AdamW learning rate",
                             [](C& c) -> double& { return c.train.critic.lr; }, kNonNegative, {"critic_lr"}));
  s.push_back(int_setting("train.critic_warmup_steps", "--critic-warmup-steps",
                          "-a PPO: linear warm-up of the critic's learning rate, in its optimizer steps",
                          [](C& c) -> int64_t& { return c.train.critic.warmup_steps; }, 0));
  s.push_back(double_setting("train.min_lr_ratio", "--min-lr-ratio", "floor of the decay, as a fraction of -lr",
                             [](C& c) -> double& { return c.train.optimizer.min_lr_ratio; }, kFraction));
  // eval
  s.push_back(string_setting("eval.eval_dataset", "--ed,--eval-dataset",
                             "held-out sets as a JSON map {\"name\": \"path.jsonl\", ...}, evaluated every -ei steps",
                             [](C& c) -> std::string& { return c.eval.dataset; }, {}, true));
  s.push_back(int_setting("eval.eval_interval", "--ei,--eval-interval",
                          "steps between evaluations of -ed (<= 0: at the end only)",
                          [](C& c) -> int64_t& { return c.eval.interval; }, -1, {}, true));
  s.push_back(string_setting("eval.eval_save_dir", "--esd,--eval-save-dir",
                             "per-sample eval JSONL under DIR/<project>/<set>/ (default: the run directory's eval/)",
                             [](C& c) -> std::string& { return c.eval.save_dir; }, {}, true));
  s.push_back(int_setting("eval.eval_n", "--eval-n", "samples per eval prompt (pass@n)",
                          [](C& c) -> int64_t& { return c.eval.n; }, 1, {}, true));
  s.push_back(double_setting("eval.eval_temperature", "--eval-temperature", "eval sampling temperature",
                             [](C& c) -> double& { return c.eval.temperature; }, kNonNegative, {}, true));
  s.push_back(bool_setting("eval.eval_greedy", "--eval-greedy", "greedy eval decoding",
                           [](C& c) -> bool& { return c.eval.greedy; }, {}, true));
  s.push_back(int_setting("eval.eval_max_new_tokens", "--eval-max-new-tokens", "eval response budget (0: -mnt)",
                          [](C& c) -> int64_t& { return c.eval.max_new_tokens; }, 0, {}, true));
  s.push_back(int_setting("eval.eval_limit", "--eval-limit", "first N prompts of each eval set (0: all)",
                          [](C& c) -> int64_t& { return c.eval.limit; }, 0, {}, true));
  // logging
  s.push_back(string_setting("logging.project", "-p,--project", "run name (folder under --save-dir)",
                             [](C& c) -> std::string& { return c.logging.project; }, {}, true));
  s.push_back(string_setting("logging.save_dir", "--sd,--save-dir", "where runs are written",
                             [](C& c) -> std::string& { return c.logging.save_dir; }, {}, true));
  s.push_back(int_setting("logging.save_interval", "--si,--save-interval", "steps between checkpoints (0: at the end)",
                          [](C& c) -> int64_t& { return c.logging.save_interval; }, 0, {}, true));
  s.push_back(bool_setting("logging.save_merged", "--save-merged",
                           "LoRA: each checkpoint also holds the merged Hugging Face model in step-N/merged/",
                           [](C& c) -> bool& { return c.logging.save_merged; }, {}, true));
  s.push_back(int_setting("logging.max_checkpoints", "--max-checkpoints", "keep the newest N checkpoints (0: all)",
                          [](C& c) -> int64_t& { return c.logging.max_checkpoints; }, 0, {}, true));
  s.push_back(string_setting("logging.rollout_save_dir", "--rsd,--rollout-save-dir",
                             "write rollouts (prompt, response, reward, ground truth) as JSONL under DIR/<project>",
                             [](C& c) -> std::string& { return c.logging.rollout_save_dir; }, {}, true));
  s.push_back(int_setting("logging.rollout_save_interval", "--rollout-save-interval", "steps between rollout files",
                          [](C& c) -> int64_t& { return c.logging.rollout_save_interval; }, 1, {}, true));
  s.push_back(int_setting("logging.log_interval", "--log-interval", "console line every N steps",
                          [](C& c) -> int64_t& { return c.logging.log_interval; }, 1, {}, true));
  s.push_back(string_setting("logging.profile_dir", "--profile-dir",
                             "write a Chrome trace (Perfetto) of every phase per rank to DIR/<project>/trace.rank-<r>.json",
                             [](C& c) -> std::string& { return c.logging.profile_dir; }, {}, true));
  s.push_back(bool_setting("logging.debug", "--debug", "debug-level log lines",
                           [](C& c) -> bool& { return c.logging.debug; }, {}, true));
  return s;
}

}  // namespace

const std::vector<Setting>& run_settings() {
  static const std::vector<Setting> settings = make_settings();
  return settings;
}

const Setting* find_setting(const std::string& name) {
  for (const auto& s : run_settings()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace rlcpp
