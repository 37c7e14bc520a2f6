#include "rl/run/run_state.h"

#include <spdlog/spdlog.h>
#include <torch/utils.h>

#include "comm/gradient_sync.h"
#include "rl/step/policy_update.h"
#include "rl/rollout/rollout_channel.h"
#include "rl/checkpoint/run_checkpoint.h"
#include "util/error.h"
#include "util/json.h"

#include <fmt/ranges.h>

namespace rlcpp {

namespace fs = std::filesystem;

namespace {

nlohmann::json groups_json(const std::vector<SampleGroup>& groups) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& g : groups) list.push_back(to_json(g));
  return list;
}

std::vector<SampleGroup> groups_from(const nlohmann::json& j, const char* key) {
  std::vector<SampleGroup> groups;
  for (const auto& g : j.value(key, nlohmann::json::array())) groups.push_back(group_from_json(g));
  return groups;
}

nlohmann::json to_json(const TrainerGroups& t) { return {{"groups", groups_json(t.groups)}, {"per_trainer", t.per_trainer}}; }

TrainerGroups trainer_groups_from(const nlohmann::json& j, const std::string& where) {
  TrainerGroups t;
  t.groups = groups_from(j, "groups");
  t.per_trainer = j.value("per_trainer", std::vector<int64_t>{});
  int64_t sum = 0;
  for (const int64_t n : t.per_trainer) {
    if (n < 0 || n > static_cast<int64_t>(t.groups.size())) sum = -1;
    if (sum >= 0) sum += n;
  }
  if (!t.per_trainer.empty() && sum != static_cast<int64_t>(t.groups.size())) {
    throw_user_error("{}: per_trainer does not count the {} groups saved; the checkpoint cannot be resumed", where,
                     t.groups.size());
  }
  return t;
}

// The buffers were lists of groups before they said which trainer held which.
TrainerGroups trainer_groups_at(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return {};
  if (j.at(key).is_array()) return {groups_from(j, key), {}};
  return trainer_groups_from(j.at(key), where);
}

}  // namespace

nlohmann::json to_json(const CheckpointState& s) {
  nlohmann::json in_flight = nlohmann::json::array();
  for (const auto& p : s.in_flight_prompts) in_flight.push_back(to_json(p));
  nlohmann::json next = nlohmann::json::array();
  for (const auto& p : s.next_prompts) next.push_back(to_json(p));
  nlohmann::json pool = nlohmann::json::array();
  for (const auto& engine : s.round.pool) {
    auto& picks = pool.emplace_back(nlohmann::json::array());
    for (const auto& p : engine) picks.push_back(to_json(p));
  }
  const RoundState& r = s.round;
  return {{"step", s.step},
          {"policy_version", s.policy_version},
          {"optimizer_steps", s.optimizer_steps},
          {"critic_optimizer_steps", s.critic_optimizer_steps},
          {"data_cursor", s.data_cursor},
          {"rollout_buffer", to_json(s.rollout_buffer)},
          {"relay_buffer", to_json(s.relay_buffer)},
          {"in_flight_prompts", in_flight},
          {"next_prompts", next},
          {"round", {{"end_step", r.end_step},
                     {"collected", r.collected ? to_json(*r.collected) : nlohmann::json(nullptr)},
                     {"in_flight", r.in_flight},
                     {"rounds_ahead", r.rounds_ahead},
                     {"pool", pool},
                     {"generated_groups", r.generated_groups},
                     {"kept_groups", r.kept_groups},
                     {"discarded", groups_json(r.discarded)}}},
          {"skipped_long_prompts", s.skipped_long_prompts},
          {"skipped_short_prompts", s.skipped_short_prompts},
          {"num_trainers", s.num_trainers},
          {"num_inferencers", s.num_inferencers}};
}

CheckpointState checkpoint_state_from_json(const nlohmann::json& j, const std::string& where) {
  CheckpointState s;
  try {
    s.step = json_get<int64_t>(j, "step", where);
    s.policy_version = json_get_or<int64_t>(j, "policy_version", 0, where);
    s.optimizer_steps = json_get<int64_t>(j, "optimizer_steps", where);
    s.critic_optimizer_steps = json_get_or<int64_t>(j, "critic_optimizer_steps", 0, where);
    s.data_cursor = j.value("data_cursor", nlohmann::json(nullptr));
    s.rollout_buffer = trainer_groups_at(j, "rollout_buffer", where);
    s.relay_buffer = trainer_groups_at(j, "relay_buffer", where);
    for (const auto& p : j.value("in_flight_prompts", nlohmann::json::array())) s.in_flight_prompts.push_back(pick_from_json(p));
    for (const auto& p : j.value("next_prompts", nlohmann::json::array())) s.next_prompts.push_back(pick_from_json(p));
    if (j.contains("round")) {
      const auto& r = j.at("round");
      s.round.end_step = json_get_or<int64_t>(r, "end_step", 0, where);
      if (r.contains("collected") && !r.at("collected").is_null()) s.round.collected = trainer_groups_from(r.at("collected"), where);
      s.round.rounds_ahead = json_get_or<int64_t>(r, "rounds_ahead", 0, where);
      for (const auto& engine : r.value("pool", nlohmann::json::array())) {
        auto& picks = s.round.pool.emplace_back();
        for (const auto& p : engine) picks.push_back(pick_from_json(p));
      }
      for (const auto& e : r.value("in_flight", nlohmann::json::array())) {
        // Checked here, so a damaged record stops the resume naming the file, not a worker later.
        try {
          if (!e.is_object()) throw InternalError(fmt::format("{}: a round in flight that is not an object", where));
          round_in_flight_from_json(e, where);
        } catch (const InternalError& error) {
          throw_user_error("{} (round.in_flight); the checkpoint cannot be resumed", error.what());
        }
        s.round.in_flight.push_back(e);
      }
      s.round.generated_groups = json_get_or<int64_t>(r, "generated_groups", 0, where);
      s.round.kept_groups = json_get_or<int64_t>(r, "kept_groups", 0, where);
      s.round.discarded = groups_from(r, "discarded");
    }
    s.skipped_long_prompts = json_get_or<int64_t>(j, "skipped_long_prompts", 0, where);
    s.skipped_short_prompts = json_get_or<int64_t>(j, "skipped_short_prompts", 0, where);
    s.num_trainers = json_get_or<int64_t>(j, "num_trainers", 1, where);
    s.num_inferencers = json_get_or<int64_t>(j, "num_inferencers", 0, where);
  } catch (const nlohmann::json::exception& e) {
    throw_user_error("{}: malformed checkpoint state ({}); the checkpoint cannot be resumed", where, e.what());
  }
  return s;
}

void check_steps_left(const RunPlan& plan) {
  if (!plan.resume_from || plan.first_step() <= plan.total_steps) return;
  throw_user_error("{}: the run already took step {} of its {}; resumed, it would train nothing. Raise --max-steps (or "
                   "-e/--num-episodes) to train on from it, or start a fresh run with another -p/--project",
                   plan.resume_from->string(), plan.saved.step, plan.total_steps);
}

int64_t run_total_steps(const RunConfig& c, int64_t n_items, int64_t items_per_step) {
  if (c.runtime.max_steps > 0) return c.runtime.max_steps;
  return std::max<int64_t>(1, n_items / std::max<int64_t>(1, items_per_step)) * c.runtime.num_episodes;
}

RunPlan plan_run(const RunConfig& c) {
  RunPlan plan;
  plan.run_dir = fs::path(c.logging.save_dir) / c.logging.project;
  fs::create_directories(plan.run_dir);
  plan.resume_from = find_resume_checkpoint(c, plan.run_dir);
  if (plan.resume_from) {
    const fs::path where = *plan.resume_from / "trainer_state" / "state.json";
    plan.saved = checkpoint_state_from_json(read_checkpoint_state(*plan.resume_from, c), where.string());
  } else if (c.runtime.resume != "auto") {
    // A fresh start over an existing run is refused here, before anything in its directory
    // (config.yaml, metrics.jsonl) is touched.
    prepare_metrics_file(plan.run_dir, c, std::nullopt);
  }
  return plan;
}

namespace {

// The plan as trainer rank 0 sends it to the other trainers.
std::string encode_plan(const RunPlan& plan) {
  return pack_message({{"run_dir", plan.run_dir.string()},
                       {"resume_from", plan.resume_from ? plan.resume_from->string() : ""},
                       {"saved", to_json(plan.saved)},
                       {"total_steps", plan.total_steps}});
}

RunPlan decode_plan(const std::string& bytes) {
  const auto j = unpack_message(bytes, "run plan");
  RunPlan plan;
  plan.run_dir = j.at("run_dir").get<std::string>();
  const auto resume_from = j.at("resume_from").get<std::string>();
  if (!resume_from.empty()) plan.resume_from = resume_from;
  plan.saved = checkpoint_state_from_json(j.at("saved"), "run plan from trainer rank 0");
  plan.total_steps = j.at("total_steps").get<int64_t>();
  return plan;
}

}  // namespace

RunPlan shared_plan(const RunConfig& c, Communicator* group) {
  if (group == nullptr || group->size() == 1) return plan_run(c);
  const bool leader = group->rank() == 0;
  RunPlan plan;
  if (leader) plan = plan_run(c);
  std::string bytes = leader ? encode_plan(plan) : std::string();
  group->broadcast_bytes(bytes, 0);
  return leader ? plan : decode_plan(bytes);
}

namespace {

ModelOptions run_model_options(const RunConfig& c, bool frozen, std::shared_ptr<Communicator> tp_group,
                               const PipelineStage& stage) {
  ModelOptions options = model_options_from_flags(c.runtime.dtype, c.runtime.device);
  options.gradient_checkpointing = c.train.gradient_checkpointing;
  options.tp_group = std::move(tp_group);
  options.stage = stage;
  if (frozen && !c.model.frozen_dtype.empty()) options.frozen_dtype = dtypes().parse(c.model.frozen_dtype, "--frozen-dtype");
  return options;
}

}  // namespace

std::shared_ptr<Transformer> load_policy(const RunConfig& c, const std::optional<fs::path>& checkpoint,
                                         std::shared_ptr<Communicator> tp_group, const PipelineStage& stage) {
  if (!c.model.lora.enabled()) {
    auto policy = Transformer::from_pretrained(checkpoint ? *checkpoint : fs::path(c.model.path),
                                               run_model_options(c, false, std::move(tp_group), stage));
    policy->eval();
    return policy;
  }
  auto policy = Transformer::from_pretrained(c.model.path, run_model_options(c, true, std::move(tp_group), stage));
  if (checkpoint) {
    if (!is_peft_adapter_dir(*checkpoint)) {
      throw_user_error("{}: a checkpoint of full weights, not a LoRA adapter ({} missing); resume it without --lora-rank",
                       checkpoint->string(), kAdapterConfigFile);
    }
    policy->load_adapter(*checkpoint);
    LoraConfig want = c.model.lora, got = policy->lora();
    if (got.rank != want.rank || got.scaling() != want.scaling()) {
      throw_user_error("{}: adapter of rank {} and scaling {} but the run asks for rank {} and scaling {}",
                       checkpoint->string(), got.rank, got.scaling(), want.rank, want.scaling());
    }
  } else {
    policy->add_adapters(c.model.lora, c.runtime.seed);
  }
  policy->eval();
  return policy;
}

std::shared_ptr<Transformer> load_critic(const RunConfig& c, const std::optional<fs::path>& checkpoint,
                                         std::shared_ptr<Communicator> tp_group, const PipelineStage& stage) {
  if (!c.algo.uses_critic()) return nullptr;
  const fs::path dir = checkpoint ? *checkpoint / "critic" : fs::path(c.critic_model());
  if (checkpoint && !fs::exists(dir / "config.json")) {
    throw_user_error("{}: the checkpoint has no critic (no config.json there): it was not written by a run with a critic "
                     "(-a PPO); resume it with the algorithm it was trained with", dir.string());
  }
  // A fresh value head is drawn from its own stream of the run's seed.
  auto critic = Transformer::classifier_from_pretrained(dir, run_model_options(c, false, std::move(tp_group), stage), 1,
                                                        c.runtime.seed ^ 0x5EED'C817'1C00'0001ULL);
  if (critic->has_adapters()) {
    throw_user_error("--critic-model {}: a LoRA adapter directory; the critic trains every weight, so give a whole model "
                     "(a LoRA reward model's merged/ directory, or `rlcpp merge`)", dir.string());
  }
  critic->eval();
  return critic;
}

std::shared_ptr<Transformer> load_reference(const RunConfig& c, std::shared_ptr<Communicator> tp_group,
                                            const PipelineStage& stage) {
  if (c.algo.loss.kl_coef == 0 || c.model.lora.enabled()) return nullptr;
  auto reference = Transformer::from_pretrained(c.model.path, run_model_options(c, true, std::move(tp_group), stage));
  reference->eval();
  return reference;
}

namespace {

constexpr int kStageTag = 9302;

}  // namespace

NamedTensors stage_weights(const Transformer& policy, bool merged) {
  if (policy.has_adapters() && !merged) return policy.trained_weights();  // LoRA: the stage's adapters
  const PipelineStage& stage = policy.options().stage;
  NamedTensors out;
  for (auto& [name, t] : merged ? policy.merged_weights() : policy.named_weights()) {
    const bool tied_copy = !stage.first() && name == "model.embed_tokens.weight";
    if (!tied_copy) out.emplace_back(name, t);
  }
  return out;
}

StageLayout receive_stage_layout(const Topology& t) {
  StageLayout layout;
  for (int s = 1; s < t.train_pp; ++s) {
    const int from = s * t.train_tp;  // the stage's first rank in the replica
    const auto list = nlohmann::json::parse(t.replica_group->recv_bytes(from, kStageTag));
    for (const auto& item : list) {
      const auto dtype = dtypes().parse(item.at("dtype").get<std::string>(), "stage layout");
      layout.tensors.emplace_back(item.at("name").get<std::string>(),
                                  torch::empty(item.at("shape").get<std::vector<int64_t>>(),
                                               torch::TensorOptions().dtype(dtype).device(torch::kMeta)));
      layout.from.push_back(from);
    }
  }
  return layout;
}

torch::Tensor receive_stage_weight(const Topology& t, const StageLayout& layout, size_t k) {
  const auto& meta = layout.tensors[k].second;
  auto out = torch::empty(meta.sizes(), meta.options().device(torch::kCPU));
  t.replica_group->recv(out, layout.from[k], kStageTag);
  return out;
}

void send_stage_weights(const Topology& t, const Transformer& policy, bool merged) {
  const auto weights = stage_weights(policy, merged);
  if (t.tp_leader()) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [name, local] : weights) {
      list.push_back({{"name", name}, {"shape", policy.global_shape(name, local)}, {"dtype", dtypes().name(local.scalar_type())}});
    }
    t.replica_group->send_bytes(list.dump(), 0, kStageTag);
  }
  for (const auto& [name, local] : weights) {
    const auto whole = policy.gather_weight(name, local, 0);  // a collective over the stage's tensor-parallel group
    if (t.tp_leader()) t.replica_group->send(whole.contiguous(), 0, kStageTag);
  }
}

NamedTensors gather_stages(const Topology& t, const Transformer& model, bool merged) {
  if (t.stage() > 0) {
    send_stage_weights(t, model, merged);
    return {};
  }
  const bool leader = t.world->rank() == 0;
  NamedTensors out;
  for (const auto& [name, local] : stage_weights(model, merged)) {
    auto w = model.gather_weight(name, local, 0);  // a collective over the stage's tensor-parallel group
    if (leader) out.emplace_back(name, w);
  }
  if (leader) {
    const StageLayout layout = receive_stage_layout(t);
    for (size_t k = 0; k < layout.tensors.size(); ++k) out.emplace_back(layout.tensors[k].first, receive_stage_weight(t, layout, k));
  }
  return out;
}

OptimizerPart optimizer_part(const RunConfig& c, const Topology* t, const Transformer& policy, ZeroOptimizer* zero) {
  OptimizerPart part;
  part.tp_size = static_cast<int>(c.parallel.tp);
  part.tp_rank = t != nullptr && policy.tensor_parallel() != nullptr ? t->tp_rank() : 0;
  part.stages = static_cast<int>(c.parallel.pp);
  part.stage = t != nullptr ? t->stage() : 0;
  const auto params = policy.trainable_parameters();
  const auto named = policy.trained_weights();
  RLCPP_CHECK(params.size() == named.size(), "{} trained tensors, {} named", params.size(), named.size());
  for (size_t k = 0; k < params.size(); ++k) {
    // ZeRO-3 keeps released tensors empty: their shapes are the optimizer's.
    const auto shape = zero != nullptr && zero->shards_parameters() ? zero->shape_of(params[k]) : params[k].sizes().vec();
    int64_t numel = 1;
    for (const int64_t d : shape) numel *= d;
    part.layout.emplace_back(named[k].first, numel);
  }
  return part;
}

PipelineStage run_pipeline_stage(const RunConfig& c, const ModelConfig& config, const Topology& t) {
  const bool leader = t.role_group->rank() == 0;
  if (c.parallel.pp_balance == StageBalance::kWork || config.classifier()) return pipeline_stage(config, t.stage(), t.train_pp);
  auto costs = torch::zeros({3}, torch::kFloat64);
  if (leader) {
    // A micro-batch of -tmbs samples as long as a prompt and a whole response may be (at most 8 x 1024 tokens).
    const int64_t rows = std::min<int64_t>(c.train.train_microbatch_size, 8);
    const int64_t length = std::min<int64_t>(c.rollout.sampling.max_new_tokens + 64, 1024);
    const StageCosts measured =
        measure_stage_costs(config, run_model_options(c, false, nullptr, {}), c.model.lora, rows, length);
    costs = torch::tensor({measured.layer, measured.embedding, measured.head}, torch::kFloat64);
    spdlog::info("--pp-balance time: over {} x {} tokens, a decoder layer takes {:.1f} ms, the embedding {:.1f} ms and the "
                 "head {:.1f} ms (the head as {:.2f} layers; by work per token, {:.2f})", rows, length, 1e3 * measured.layer,
                 1e3 * measured.embedding, 1e3 * measured.head, measured.head / measured.layer,
                 work_stage_costs(config).head / work_stage_costs(config).layer);
  }
  t.role_group->broadcast(costs, 0);
  return pipeline_stage(config, t.stage(), t.train_pp,
                        {costs[0].item<double>(), costs[1].item<double>(), costs[2].item<double>()});
}

EngineConfig policy_engine_config(const RunConfig& c, const RunState& run) {
  EngineConfig config = run_engine_config(c);
  if (run.topology != nullptr && run.topology->train_pp > 1) {
    config.group = run.topology->replica_group;
    config.pipeline = run.topology->pp_group;
  }
  return config;
}

RunState load_run(const RunConfig& c, const Topology* topology) {
  RunState run;
  Communicator* trainers = topology != nullptr ? topology->role_group.get() : nullptr;
  const bool leader = trainers == nullptr || trainers->rank() == 0;
  const int64_t n_trainers = topology == nullptr ? 1 : topology->num_replicas();
  if (leader) {
    run.tokenizer = Tokenizer::from_dir(c.model.path);
    run.plan = plan_run(c);
    DatasetOptions options;
    options.skip_bad_lines = c.runtime.skip_bad_lines;
    options.kind = grades_answers(c.reward) ? DatasetKind::kPrompts : DatasetKind::kOpenPrompts;
    const RewardFunction reward = make_reward_function(c.reward);  // its check of each record
    run.dataset = load_prompt_dataset(c.runtime.dataset, checked_by(reward, options));
    const int64_t n_records = static_cast<int64_t>(run.dataset.records.size());
    // Sizes against the dataset, before any work: a step needs n_trainers * tbs distinct prompts.
    if (n_trainers * c.train.train_batch_size > n_records) {
      throw_user_error("-tbs/--train-batch-size {}{} asks for {} prompts per step, but {} has {}; lower -tbs",
                       c.train.train_batch_size, n_trainers > 1 ? fmt::format(" on {} trainers", n_trainers) : "",
                       n_trainers * c.train.train_batch_size, c.runtime.dataset, n_records);
    }
    run.cursor = std::make_unique<DatasetCursor>(n_records, c.runtime.seed, /*shuffle=*/true);
    run.plan.total_steps = run_total_steps(c, n_records, n_trainers * c.train.train_batch_size);
    check_steps_left(run.plan);
    if (run.plan.resume_from) {
      run.cursor->restore(run.plan.saved.data_cursor);
    } else if (c.runtime.consumed_samples > 0) {
      for (int64_t k = 0; k < c.runtime.consumed_samples; ++k) run.cursor->next();
      spdlog::info("consumed_samples {}: the first {} prompts of the shuffled order are skipped", c.runtime.consumed_samples,
                   c.runtime.consumed_samples);
    }
  }
  if (trainers != nullptr && trainers->size() > 1) {
    std::string bytes = leader ? encode_plan(run.plan) : std::string();
    trainers->broadcast_bytes(bytes, 0);
    if (!leader) run.plan = decode_plan(bytes);
  }

  // LibTorch's own generator (LoRA dropout) starts from the run's seed; a resume restores its state.
  torch::manual_seed(c.runtime.seed);
  const auto tp_group = topology != nullptr ? topology->tp_group : nullptr;
  const bool pipeline = topology != nullptr && topology->train_pp > 1;
  const PipelineStage stage = pipeline ? run_pipeline_stage(c, ModelConfig::load(c.model.path), *topology) : PipelineStage{};
  run.policy = load_policy(c, run.plan.resume_from, tp_group, stage);
  run.reference = load_reference(c, tp_group, stage);
  run.trainer = std::make_unique<Trainer>(run.policy, run.reference, rl_trainer_config(c, run.plan.total_steps));
  run.topology = topology;
  if (pipeline) {
    run.trainer->enable_pipeline(topology->pp_group);
    if (leader) {
      spdlog::info("pipeline parallelism: {} stages per replica; trainer 0 holds decoder layers [{}, {}) of {}",
                   topology->train_pp, stage.layer_begin, stage.layer_end, run.policy->config().num_hidden_layers);
    }
  }
  if (leader && run.policy->tensor_parallel() != nullptr) {
    const auto& shape = run.policy->tensor_parallel()->shape();
    spdlog::info("tensor parallelism: {} ranks per replica; trainer 0 holds query heads [{}, {}), KV heads {}, MLP "
                 "channels [{}, {}), tokens [{}, {})", c.parallel.tp, shape.q_begin, shape.q_end, fmt::join(shape.kv_heads, ","),
                 shape.mlp_begin, shape.mlp_end, shape.vocab_begin, shape.vocab_end);
  }
  if (c.parallel.zero > 0 && topology != nullptr) {
    run.trainer->enable_zero(*topology->dp_group, static_cast<int>(c.parallel.zero), kGradientBucketBytes);
    if (leader) {
      spdlog::info("ZeRO stage {}: AdamW moments{} sharded over {} trainers, {} of {} trained elements here", c.parallel.zero,
                   c.parallel.zero == 3 ? ", gradients and parameters" : c.parallel.zero == 2 ? " and gradients" : "",
                   topology->dp_group->size(), run.trainer->zero()->end() - run.trainer->zero()->begin(),
                   run.trainer->zero()->total());
    }
  }
  run.critic = load_critic(c, run.plan.resume_from, tp_group, stage);
  if (run.critic) {
    run.critic_trainer = std::make_unique<Trainer>(run.critic, nullptr, critic_trainer_config(c, run.plan.total_steps));
    if (pipeline) run.critic_trainer->enable_pipeline(topology->pp_group);  // the policy's stages
    if (c.parallel.zero > 0 && topology != nullptr) {  // sharded over the same trainers as the policy
      run.critic_trainer->enable_zero(*topology->dp_group, static_cast<int>(c.parallel.zero), kGradientBucketBytes);
    }
    if (leader) {
      const bool fresh_head = !run.plan.resume_from && !ModelConfig::load(c.critic_model()).classifier();
      spdlog::info("critic: {}{}, learning rate {:g}, warm-up {} steps",
                   run.plan.resume_from ? (*run.plan.resume_from / "critic").string() : c.critic_model(),
                   fresh_head ? " with a fresh value head" : "", c.train.critic.lr, c.train.critic.warmup_steps);
    }
  }
  if (run.plan.resume_from) {
    GatheredParameters whole(run.trainer->zero());  // ZeRO-3: the optimizer's parameters have their shapes
    load_checkpoint_optimizer(*run.plan.resume_from, *run.trainer, optimizer_part(c, topology, *run.policy, run.trainer->zero()));
    run.trainer->restore_steps(run.plan.saved.optimizer_steps);
    run.policy_version = run.plan.saved.policy_version;
    if (run.critic_trainer) {
      ZeroOptimizer* critic_zero = run.critic_trainer->zero();
      GatheredParameters critic_whole(critic_zero);
      load_checkpoint_optimizer(*run.plan.resume_from / "critic", *run.critic_trainer,
                                optimizer_part(c, topology, *run.critic, critic_zero));
      run.critic_trainer->restore_steps(run.plan.saved.critic_optimizer_steps);
    }
  }
  return run;
}

fs::path save_run(const RunConfig& c, const RunState& run, const CheckpointState& state) {
  const Topology* t = run.topology;
  const bool leader = t == nullptr || t->world->rank() == 0;
  auto* zero = run.trainer->zero();
  const bool tp = run.policy->tensor_parallel() != nullptr;
  const bool pp = t != nullptr && t->train_pp > 1;
  const bool first_replica = t == nullptr || t->replica() == 0;
  // Optimizer shards go to trainer 0 from every trainer under ZeRO (each its shard of its part),
  // else from the first replica's ranks (each the whole state of its part: its stage's
  // tensor-parallel part); one process alone writes optimizer.pt. Each shard names its tensors,
  // so a resume may take them at another --pp, ZeRO stage or trainer count.
  // The critic's (-a PPO) go the same way, after the policy's.
  Communicator* senders = zero != nullptr ? t->role_group.get() : t != nullptr && first_replica ? t->replica_group.get() : nullptr;
  auto shard_of = [&](Trainer& trainer, const Transformer& model) {
    OptimizerPart part = optimizer_part(c, t, model, trainer.zero());
    if (trainer.zero() != nullptr) return optimizer_shard(trainer.zero()->state(), std::move(part));
    // The whole state of this rank's part, flattened a piece at a time as it goes.
    auto* optimizer = &trainer.optimizer();
    const auto params = optimizer->param_groups().at(0).params();
    return OptimizerShard{0, flat_numel(params), std::move(part),
                          [optimizer, params](int64_t a, int64_t b) { return flat_adamw_state(*optimizer, params, a, b); }};
  };
  OptimizerShard mine;
  if (senders != nullptr) mine = shard_of(*run.trainer, *run.policy);
  // -a PPO: the critic's optimizer shards (under ZeRO or tensor parallelism) after the policy's, over the same group.
  ZeroOptimizer* critic_zero = run.critic_trainer ? run.critic_trainer->zero() : nullptr;
  Communicator* critic_senders = run.critic && (critic_zero != nullptr || tp || pp) ? senders : nullptr;
  OptimizerShard critic_mine;
  if (critic_senders != nullptr) critic_mine = shard_of(*run.critic_trainer, *run.critic);
  // Tensor parallelism: the first replica's parts whole on trainer 0, for the model directory.
  // Pipeline parallelism: its stages' weights, whole, streamed to trainer 0 stage by stage.
  WholeModel whole(*run.policy, 0, tp && first_replica && !pp);
  NamedTensors pipeline_weights, pipeline_merged;  // under LoRA with --save-merged, also the merged model
  if (pp && first_replica) {
    pipeline_weights = gather_stages(*t, *run.policy);
    if (run.policy->has_adapters() && c.logging.save_merged) pipeline_merged = gather_stages(*t, *run.policy, /*merged=*/true);
  }
  // -a PPO: the critic whole on trainer 0 under tensor parallelism; under pipeline parallelism its
  // stages go to trainer 0 once the policy's directory is written.
  std::optional<WholeModel> critic_whole;
  if (run.critic) critic_whole.emplace(*run.critic, 0, tp && first_replica && !pp);
  if (!leader) {
    if (senders != nullptr) send_optimizer_shard(*senders, mine);
    if (run.critic && pp && first_replica) gather_stages(*t, *run.critic);
    if (critic_senders != nullptr) send_optimizer_shard(*critic_senders, critic_mine);
    return {};
  }
  std::function<void(const fs::path&)> write_optimizer;
  if (senders != nullptr) {
    write_optimizer = [&run, zero, senders, &mine, &pipeline_weights, &pipeline_merged](const fs::path& state_dir) {
      // The model directory is written: its whole copies go before the shards arrive.
      run.policy->release_whole();
      pipeline_weights.clear();
      pipeline_merged.clear();
      if (zero != nullptr && zero->stage() == 3) zero->release_all();
      write_optimizer_shards(state_dir, *senders, mine);
    };
  }
  std::function<void(const fs::path&)> write_critic;
  if (run.critic) {
    write_critic = [&](const fs::path& step_dir) {
      NamedTensors critic_stages;
      if (pp) critic_stages = gather_stages(*t, *run.critic);
      std::function<void(const fs::path&)> write_shards;
      if (critic_senders != nullptr) {
        write_shards = [&](const fs::path& state_dir) {
          run.critic->release_whole();  // written whole: the shards come next
          critic_stages.clear();
          if (critic_zero != nullptr && critic_zero->stage() == 3) critic_zero->release_all();
          write_optimizer_shards(state_dir, *critic_senders, critic_mine);
        };
      }
      save_critic_dir(step_dir / "critic", *run.critic, c.model.path, run.critic_trainer->optimizer(), write_shards,
                      pp ? &critic_stages : nullptr);
    };
  }
  return save_run_checkpoint(c, run.plan.run_dir, state.step, *run.policy, run.trainer->optimizer(), to_json(state),
                             write_optimizer, pp ? &pipeline_weights : nullptr, write_critic,
                             pp && !pipeline_merged.empty() ? &pipeline_merged : nullptr);
}

}  // namespace rlcpp
