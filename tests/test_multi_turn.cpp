// Multi-turn rollouts: the engine continuing sequences from their KV blocks (against the eager
// reference, the prefilled-token count, preemption and eviction, the trainer's log-probs), the
// turn-by-turn default for other backends, tool calls and tools, the inserted turns of real chat
// templates with the token-exactness check (exact, rerender, mismatch), and episodes end to end.
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "env/episode.h"
#include "env/tools.h"
#include "rl/rollout/agent_loop.h"
#include "sandbox/sandbox_pool.h"
#include "real_tokenizer.h"
#include "test_util.h"
#include "trainer_logprobs.h"
#include "text/tool_calls.h"
#include "text/tokenizer.h"
#include "text/turn_render.h"
#include "util/error.h"
#include "util/file.h"

using namespace rlcpp;
using rlcpp::testing::real_tokenizer;
namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

namespace {

// Continues every sample for `turns` turns, inserting tokens that depend on (request, sample,
// turn), optionally answering on a thread of its own after a short wait.
class ScriptedTurns : public TurnHandler {
 public:
  ScriptedTurns(int64_t turns, int64_t vocab, int64_t turn_limit, int64_t lag = 1, bool slow = false)
      : turns_(turns), vocab_(vocab), turn_limit_(turn_limit), lag_(lag), slow_(slow) {}

  int64_t first_turn_limit(int64_t /*request*/) const override { return turn_limit_; }
  int64_t resume_lag() const override { return lag_; }

  std::shared_future<TurnOutcome> turn_ended(const TurnEnd& end) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t turn = ++seen_[{end.request, end.sample}];
    TurnOutcome outcome;
    if (turn < turns_) {
      outcome.go_on = true;
      for (int64_t k = 0; k < 2 + turn; ++k) {
        outcome.inserted.push_back(static_cast<int32_t>((31 * end.request + 17 * end.sample + 7 * turn + 3 * k) % vocab_));
      }
      outcome.turn_limit = turn_limit_;
      ++resumes_;
      inserted_ += static_cast<int64_t>(outcome.inserted.size());
      script_[{end.request, end.sample}].push_back(outcome.inserted);
    }
    if (!slow_) return ready_outcome(outcome);
    return std::async(std::launch::async, [outcome, turn] {
             std::this_thread::sleep_for(std::chrono::milliseconds(turn % 3));
             return outcome;
           }).share();
  }

  int64_t resumes() const { return resumes_; }
  int64_t inserted() const { return inserted_; }
  const std::vector<std::vector<int32_t>>& script(int64_t request, int64_t sample) { return script_[{request, sample}]; }

 private:
  int64_t turns_, vocab_, turn_limit_, lag_;
  bool slow_;
  std::mutex mutex_;
  std::map<std::pair<int64_t, int64_t>, int64_t> seen_;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<int32_t>>> script_;
  int64_t resumes_ = 0, inserted_ = 0;
};

std::vector<GenerationRequest> turn_requests(int64_t vocab, double temperature, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<GenerationRequest> requests;
  for (int64_t len : {3, 9, 14, 6}) {
    GenerationRequest r;
    for (int64_t k = 0; k < len; ++k) r.prompt_ids.push_back(static_cast<int32_t>(rng() % vocab));
    r.params.temperature = temperature;
    r.params.max_new_tokens = 64;
    for (int32_t t = 0; t < 30; ++t) r.params.stop_token_ids.push_back(static_cast<int32_t>((t * 11 + 5) % vocab));
    r.n = len % 2 == 1 ? 3 : 2;
    r.seed = rng();
    requests.push_back(r);
  }
  return requests;
}

EngineConfig engine_config(int64_t n_blocks = 256, int64_t block_size = 4) {
  EngineConfig c;
  c.n_blocks = n_blocks;
  c.block_size = block_size;
  return c;
}

void expect_same_trajectories(const std::vector<GeneratedSample>& a, const std::vector<GeneratedSample>& b,
                              const std::string& what, double logprob_tolerance = 1e-5) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].request, b[k].request) << what;
    EXPECT_EQ(a[k].sample, b[k].sample) << what;
    EXPECT_EQ(a[k].token_ids, b[k].token_ids) << what << " trajectory " << k;
    EXPECT_EQ(a[k].inserted, b[k].inserted) << what << " trajectory " << k;
    EXPECT_EQ(a[k].finish_reason, b[k].finish_reason) << what << " trajectory " << k;
    ASSERT_EQ(a[k].logprobs.size(), b[k].logprobs.size()) << what;
    for (size_t t = 0; t < a[k].logprobs.size(); ++t) EXPECT_NEAR(a[k].logprobs[t], b[k].logprobs[t], logprob_tolerance);
  }
}

// A backend that is only generate(): the turn-by-turn default of generate_turns.
class GenerateOnly : public RolloutBackend {
 public:
  explicit GenerateOnly(Engine& engine) : engine_(engine) {}
  std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) override {
    ++calls_;
    return engine_.generate(requests);
  }
  int64_t calls() const { return calls_; }

 private:
  Engine& engine_;
  int64_t calls_ = 0;
};

}  // namespace

TEST(MultiTurnEngine, ContinuedSequencesEqualTheEagerReferenceAndPrefillOnlyWhatIsNew) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    const int64_t vocab = model->config().vocab_size;
    auto requests = turn_requests(vocab, 0.9, 5);
    ScriptedTurns fast_turns(3, vocab, /*turn_limit=*/6);
    Engine engine(model, engine_config());
    auto fast = engine.generate_turns(requests, fast_turns);
    ScriptedTurns slow_turns(3, vocab, 6);
    auto slow = generate_eager_turns(*model, requests, nullptr, slow_turns);
    expect_same_trajectories(fast, slow, "engine vs eager");
    // Every trajectory took its three turns, the inserted runs where the handler put them (log-prob 0).
    int64_t prompt_tokens = 0;
    for (const auto& r : requests) prompt_tokens += static_cast<int64_t>(r.prompt_ids.size());
    for (const auto& s : fast) {
      ASSERT_EQ(s.inserted.size(), 2u);
      const auto& script = fast_turns.script(s.request, s.sample);
      for (size_t k = 0; k < s.inserted.size(); ++k) {
        const auto& run = s.inserted[k];
        EXPECT_EQ(std::vector<int32_t>(s.token_ids.begin() + run.start, s.token_ids.begin() + run.start + run.length), script[k]);
        for (int64_t t = run.start; t < run.start + run.length; ++t) EXPECT_EQ(s.logprobs[static_cast<size_t>(t)], 0.0F);
      }
    }
    // Prefill: each group's prompt once, then per resumed turn only the inserted tokens and the
    // turn's last sampled token (never in the cache before): no second prefill of the trajectory.
    const auto& stats = engine.last_stats().scheduler;
    EXPECT_EQ(stats.n_preemptions, 0);
    EXPECT_EQ(stats.n_evictions, 0);
    EXPECT_EQ(stats.n_prefill_tokens, prompt_tokens + fast_turns.inserted() + fast_turns.resumes());
    EXPECT_GT(fast_turns.resumes(), 0);
  }
}

TEST(MultiTurnEngine, SameTokensUnderPressureChunksLagsAndSlowHandlers) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  const int64_t vocab = model->config().vocab_size;
  auto requests = turn_requests(vocab, 1.0, 7);
  ScriptedTurns reference_turns(3, vocab, 6);
  Engine reference_engine(model, engine_config());
  const auto reference = reference_engine.generate_turns(requests, reference_turns);
  // A cache of 24 blocks of 4 tokens for 10 trajectories of up to 14 + 64 tokens: paused
  // sequences are evicted and running ones preempted, then recomputed from their tokens.
  {
    ScriptedTurns turns(3, vocab, 6);
    Engine tiny(model, engine_config(24, 4));
    expect_same_trajectories(tiny.generate_turns(requests, turns), reference, "tiny cache", 1e-4);
    EXPECT_GT(tiny.last_stats().scheduler.n_evictions + tiny.last_stats().scheduler.n_preemptions, 0);
    EXPECT_TRUE(tiny.last_stats().scheduler.n_prefill_tokens > 0);
  }
  for (int64_t lag : {3, 6}) {  // turns out for several steps: paused sequences hold blocks while others wait
    ScriptedTurns turns(3, vocab, 6, lag);
    Engine tiny(model, engine_config(24, 4));
    expect_same_trajectories(tiny.generate_turns(requests, turns), reference, fmt::format("tiny cache, lag {}", lag), 1e-4);
    EXPECT_GT(tiny.last_stats().scheduler.n_evictions, 0);
  }
  for (int64_t lag : {2, 5}) {
    ScriptedTurns turns(3, vocab, 6, lag, /*slow=*/true);
    EngineConfig c = engine_config();
    c.scheduler.max_num_batched_tokens = 5;  // resumed turns in chunks among the decoding ones
    Engine e(model, c);
    expect_same_trajectories(e.generate_turns(requests, turns), reference, fmt::format("lag {} chunks of 5", lag), 1e-4);
  }
  {
    ScriptedTurns turns(3, vocab, 6);
    EngineConfig c = engine_config();
    c.scheduler.prefix_sharing = false;
    c.scheduler.max_num_seqs = 2;
    expect_same_trajectories(Engine(model, c).generate_turns(requests, turns), reference, "two at a time", 1e-4);
  }
}

// --stream-prompts and --group-order completion over episodes: a call ends at the step in which
// enough groups have every trajectory ended. Those are as in the whole call; each other trajectory
// is the start of its whole one (a turn that had ended gets its answer first), ending with kAbort.
TEST(MultiTurnEngine, EarlyStopEndsOnceGroupsHaveEveryTrajectoryEnded) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("qwen2-tiny"));
  const int64_t vocab = model->config().vocab_size;
  auto requests = turn_requests(vocab, 1.0, 7);
  // Request 0's trajectories end when their first turn's answer comes (due the step after the turn
  // ended) and leaves no room in their response budget. The others' first turns ended in the same
  // step: the call ends right there, with their answers added and nothing sampled after them.
  requests[0].params.max_new_tokens = 9;
  Engine engine(model, engine_config());
  ScriptedTurns whole_turns(3, vocab, 6);
  const auto whole = engine.generate_turns(requests, whole_turns);
  EarlyStop stop;
  stop.group_of = {0, 1, 1, 2};  // requests 1 and 2 are one group
  stop.groups = 1;
  ScriptedTurns turns(3, vocab, 6);
  const auto got = engine.generate_turns(requests, turns, stop);
  EXPECT_FALSE(engine.cut());  // ending early is not a checkpoint's cut
  ASSERT_EQ(got.size(), whole.size());
  std::map<int64_t, bool> ended;  // request: every trajectory ended
  int64_t stopped = 0, answered = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const GeneratedSample& a = got[k];
    const GeneratedSample& b = whole[k];
    ASSERT_EQ(a.request, b.request);
    ASSERT_LE(a.token_ids.size(), b.token_ids.size());
    EXPECT_TRUE(std::equal(a.token_ids.begin(), a.token_ids.end(), b.token_ids.begin())) << "trajectory " << k;
    ASSERT_LE(a.inserted.size(), b.inserted.size());
    EXPECT_TRUE(std::equal(a.inserted.begin(), a.inserted.end(), b.inserted.begin())) << "trajectory " << k;
    auto [it, fresh] = ended.try_emplace(a.request, true);
    it->second = it->second && a.finish_reason != FinishReason::kAbort;
    if (a.finish_reason != FinishReason::kAbort) {
      EXPECT_EQ(a.token_ids, b.token_ids) << "trajectory " << k;
      continue;
    }
    ++stopped;
    // Ended right after an answer was added: the run inserted last closes the trajectory.
    if (!a.inserted.empty() && a.inserted.back().start + a.inserted.back().length == static_cast<int64_t>(a.token_ids.size())) ++answered;
  }
  EXPECT_GT(stopped, 0);
  EXPECT_EQ(answered, stopped);
  const bool group0 = ended[0], group1 = ended[1] && ended[2], group2 = ended[3];
  EXPECT_GE(int{group0} + int{group1} + int{group2}, 1) << "no group ended";
  std::printf("     %lld of %zu trajectories stopped early, %lld right after an answer\n", static_cast<long long>(stopped),
              got.size(), static_cast<long long>(answered));
  stop.groups = 3;  // every group: nothing ends early
  ScriptedTurns all_turns(3, vocab, 6);
  expect_same_trajectories(engine.generate_turns(requests, all_turns, stop), whole, "every group");
}

TEST(MultiTurnEngine, SampledLogprobsOfEveryTurnEqualTheTrainers) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    auto model = Transformer::from_pretrained(dir);
    const int64_t vocab = model->config().vocab_size;
    auto requests = turn_requests(vocab, 0.8, 9);
    ScriptedTurns turns(3, vocab, 6);
    const auto samples = Engine(model, engine_config()).generate_turns(requests, turns);
    double worst = 0;
    for (const auto& s : samples) {
      const auto trainer = rlcpp::testing::trainer_logprobs(*model, requests[static_cast<size_t>(s.request)].prompt_ids,
                                                            s.token_ids, 0.8);
      std::vector<uint8_t> inserted(s.token_ids.size(), 0);
      for (const auto& run : s.inserted) std::fill_n(inserted.begin() + run.start, run.length, 1);
      for (size_t t = 0; t < s.token_ids.size(); ++t) {
        if (inserted[t]) continue;
        worst = std::max(worst, std::abs(trainer[t] - s.logprobs[t]));
      }
    }
    EXPECT_LT(worst, 1e-5);
  }
}

TEST(MultiTurnEngine, OtherBackendsSendEachTurnAsTheWholeSequence) {
  auto model = Transformer::from_pretrained(rlcpp::testing::fixture("llama-tiny"));
  const int64_t vocab = model->config().vocab_size;
  auto requests = turn_requests(vocab, 0.7, 11);
  for (auto& r : requests) r.params.max_new_tokens = 30;  // some trajectories end at the budget
  Engine engine(model, engine_config());
  GenerateOnly backend(engine);
  ScriptedTurns turns(4, vocab, 5);
  const auto out = backend.generate_turns(requests, turns);
  EXPECT_GE(backend.calls(), 2);
  ASSERT_EQ(out.size(), 10u);
  bool budget_ended = false;
  for (const auto& s : out) {
    const auto& script = turns.script(s.request, s.sample);
    ASSERT_LE(s.inserted.size(), script.size());
    for (size_t k = 0; k < s.inserted.size(); ++k) {
      const auto& run = s.inserted[k];
      EXPECT_EQ(std::vector<int32_t>(s.token_ids.begin() + run.start, s.token_ids.begin() + run.start + run.length), script[k]);
    }
    EXPECT_LE(static_cast<int64_t>(s.token_ids.size()), 30);
    EXPECT_EQ(s.logprobs.size(), s.token_ids.size());
    budget_ended = budget_ended || s.finish_reason == FinishReason::kLength;
  }
  EXPECT_TRUE(budget_ended);
}

TEST(ToolCalls, HermesAndLlamaFormatsAndMalformedCalls) {
  auto calls = parse_tool_calls("I will compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2*3\"}}\n</tool_call>"
                                "<tool_call>{\"name\": \"python\", \"arguments\": \"{\\\"code\\\": \\\"print(1)\\\"}\"}</tool_call>",
                                ToolFormat::kHermes);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "calculator");
  EXPECT_EQ(calls[0].arguments["expression"], "2*3");
  EXPECT_EQ(calls[1].name, "python");  // arguments written as a JSON string
  EXPECT_EQ(calls[1].arguments["code"], "print(1)");
  EXPECT_TRUE(parse_tool_calls("no call here", ToolFormat::kHermes).empty());
  auto bad = parse_tool_calls("<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": </tool_call>", ToolFormat::kHermes);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].error.find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>", ToolFormat::kHermes)[0].error.find("no \"name\""),
            std::string::npos);
  EXPECT_NE(parse_tool_calls("<tool_call>{\"name\": \"f\"", ToolFormat::kHermes)[0].error.find("closing"), std::string::npos);
  auto llama = parse_tool_calls("{\"name\": \"calculator\", \"parameters\": {\"expression\": \"1+1\"}}", ToolFormat::kLlama3);
  ASSERT_EQ(llama.size(), 1u);
  EXPECT_EQ(llama[0].arguments["expression"], "1+1");
  auto two = parse_tool_calls("{\"name\": \"a\", \"parameters\": {\"s\": \"}{\"}}; {\"name\": \"b\", \"parameters\": {}}", ToolFormat::kLlama3);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].arguments["s"], "}{");
  EXPECT_EQ(two[1].name, "b");
  auto tagged = parse_tool_calls("<|python_tag|>print(2+2)", ToolFormat::kLlama3);
  ASSERT_EQ(tagged.size(), 1u);
  EXPECT_EQ(tagged[0].name, "python");
  EXPECT_EQ(tagged[0].arguments["code"], "print(2+2)");
  EXPECT_TRUE(parse_tool_calls("The answer is 4.", ToolFormat::kLlama3).empty());
  EXPECT_EQ(detect_tool_format("{{ '<|python_tag|>' }}"), ToolFormat::kLlama3);
  EXPECT_EQ(detect_tool_format("<tool_call>"), ToolFormat::kHermes);
  EXPECT_EQ(parse_tool_calls(format_tool_call("calculator", {{"expression", "7*6"}}, ToolFormat::kHermes), ToolFormat::kHermes)[0]
                .arguments["expression"], "7*6");
}

TEST(Tools, CalculatorIsExactAndSaysWhatItCannotRead) {
  EXPECT_EQ(calculate("1234 * 5678").text, "7006652");
  EXPECT_EQ(calculate("1/3 + 1/6").text, "1/2");
  EXPECT_EQ(calculate("2^10 - 0.5").text, "2047/2");
  EXPECT_EQ(calculate("-(3 - 10) * 4").text, "28");
  EXPECT_EQ(calculate("123456789 * 987654321 * 1000").text, "121932631112635269000");
  EXPECT_EQ(calculate("\\sqrt{2}").text, "1.41421356237");
  EXPECT_TRUE(calculate("1/0").error);
  EXPECT_TRUE(calculate("x + 1").error);
  EXPECT_TRUE(calculate("import os").error);
  ToolSet tools("calculator", nullptr, {});
  EXPECT_EQ(tools.names(), std::vector<std::string>{"calculator"});
  EXPECT_EQ(tools.schemas()[0]["function"]["name"], "calculator");
  ToolCall call;
  call.name = "calculator";
  call.arguments = {{"expr", "1"}};
  EXPECT_TRUE(tools.call(call, 1).error);
  EXPECT_NE(tools.call(call, 1).text.find("{\"expression\": string}"), std::string::npos);
  call.name = "search";
  EXPECT_NE(tools.call(call, 1).text.find("unknown tool \"search\""), std::string::npos);
  EXPECT_THROW_MSG(ToolSet("calculator,web", nullptr, {}), UserError, "unknown tool \"web\"");
  rlcpp::testing::TempDir dir;
  write_file_atomic(dir / "tools.json", "[{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": \"Exact math\"}}]");
  ToolSet from_file((dir / "tools.json").string(), nullptr, {});
  EXPECT_EQ(from_file.schemas()[0]["function"]["description"], "Exact math");
  write_file_atomic(dir / "bad.json", "{\"name\": 1}");
  EXPECT_THROW_MSG(ToolSet((dir / "bad.json").string(), nullptr, {}), UserError, "expected a JSON array");
}

TEST(Tools, PythonRunsInTheSandboxWithinTheToolTimeout) {
  SandboxPool pool(2);
  ToolSet tools("python", &pool, {});
  ToolCall call;
  call.name = "python";
  call.arguments = {{"code", "print(sum(range(10)))"}};
  EXPECT_EQ(tools.call(call, 5).text, "45\n");
  call.arguments = {{"code", "raise ValueError('boom')"}};
  EXPECT_NE(tools.call(call, 5).text.find("ValueError: boom"), std::string::npos);
  call.arguments = {{"code", "while True: pass"}};
  const auto slow = tools.call(call, 0.5);
  EXPECT_NE(slow.text.find("ran past the tool's limit of 0.5 s"), std::string::npos);
  call.arguments = {{"code", "import os; print(os.path.exists('/etc/passwd'), os.path.exists('/home'))"}};
  EXPECT_EQ(tools.call(call, 5).text, "False False\n");  // the sandbox's root, not the machine's
}

namespace {

struct TemplateCase {
  std::string name, package, template_file;
  std::string stop;       // the token the model ends a turn with
  std::string think;      // a reasoning block the model writes first (Qwen3)
};

// Drives an episode the way the agent loop does, with the model's turns given as text (encoded as
// a model would sample them, then the stop token): a calculator call, then the answer.
Episode run_calculator_episode(const Agent& agent, const Tokenizer& tok, const TemplateCase& c, std::vector<int32_t>* ids,
                               std::vector<uint8_t>* sampled) {
  OJson messages = OJson::array({{{"role", "system"}, {"content", "Use the calculator for products."}},
                                 {{"role", "user"}, {"content", "What is 1234 * 5678?"}}});
  Episode episode(agent, 0, messages, nlohmann::json::object());
  const std::string prompt = agent.chat().render(messages, true, agent.template_variables());
  episode.set_prompt_text(prompt);
  *ids = tok.encode(prompt);
  sampled->assign(ids->size(), 0);
  const int32_t stop = *tok.token_to_id(c.stop);
  int64_t response = 0;
  auto model_turn = [&](const std::string& text) {
    auto turn = tok.encode(text);
    turn.push_back(stop);
    ids->insert(ids->end(), turn.begin(), turn.end());
    sampled->resize(ids->size(), 1);
    response += static_cast<int64_t>(turn.size());
    return turn;
  };
  const std::string call = c.think + format_tool_call("calculator", {{"expression", "1234 * 5678"}}, agent.format());
  const EpisodeNext next = episode.turn(model_turn(call), true, response, 4096);
  EXPECT_TRUE(next.go_on) << c.name;
  EXPECT_NE(tok.decode(next.inserted).find("7006652"), std::string::npos) << c.name << ": " << tok.decode(next.inserted);
  ids->insert(ids->end(), next.inserted.begin(), next.inserted.end());
  sampled->resize(ids->size(), 0);
  response += static_cast<int64_t>(next.inserted.size());
  const EpisodeNext last = episode.turn(model_turn(c.think + "The product is 7006652."), true, response, 4096);
  EXPECT_FALSE(last.go_on) << c.name;
  episode.finish(false, *ids, *sampled);
  return episode;
}

}  // namespace

TEST(TokenExact, ToolTurnsOfRealTemplatesRenderExactly) {
  const std::vector<TemplateCase> cases = {
      {"Qwen2.5", "qwen3", "qwen2.5.jinja", "<|im_end|>", ""},
      {"Qwen3", "qwen3", "", "<|im_end|>", "<think>\nA product of two numbers.\n</think>\n\n"},
      {"Llama 3.1", "llama3_1", "llama3.1.jinja", "<|eot_id|>", ""},
      {"ChatML", "qwen3", "chatml", "<|im_end|>", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto tok = real_tokenizer(c.package, c.template_file);
    EpisodeOptions options;
    options.tools = "calculator";
    Agent agent(*tok, options, OJson::object(), nullptr, {});
    if (c.name == "Llama 3.1") {
      EXPECT_EQ(agent.format(), ToolFormat::kLlama3);
    }
    if (c.name != "ChatML") {  // the tools are declared to the model through the template
      EXPECT_NE(agent.chat().render(OJson::array({{{"role", "user"}, {"content", "q"}}}), true, agent.template_variables())
                    .find("\"calculator\""), std::string::npos);
    }
    std::vector<int32_t> ids;
    std::vector<uint8_t> sampled;
    Episode episode = run_calculator_episode(agent, *tok, c, &ids, &sampled);
    EXPECT_EQ(episode.tito().kind, TitoKind::kExact) << episode.tito().detail;
    EXPECT_EQ(episode.n_tool_calls(), 1);
    EXPECT_EQ(episode.n_tool_errors(), 0);
    EXPECT_EQ(episode.ended_by(), EpisodeEnd::kAnswer);
    EXPECT_EQ(episode.final_text(), c.think + "The product is 7006652.");
    const auto summary = episode.summary();
    ASSERT_EQ(summary["turns"].size(), 3u);
    EXPECT_EQ(summary["turns"][1]["role"], "tool");
    EXPECT_EQ(summary["turns"][1]["content"], "7006652");
    EXPECT_FALSE(summary["turns"][1]["trained"].get<bool>());
    EXPECT_EQ(summary["tito"], "exact");
  }
}

namespace {

// The sequence an episode builds for [user q, assistant a1, `observation` as a user turn,
// assistant a2], and the template's check of it.
TitoCheck check_with_observation(const Tokenizer& tok, const ChatTemplate& chat, const std::string& a1, const std::string& a2,
                                 const std::string& stop_text) {
  TurnRenderer renderer(tok, chat, OJson::object());
  OJson conversation = OJson::array({{{"role", "user"}, {"content", "q"}}});
  std::string expected = chat.render(conversation, true);
  std::vector<int32_t> ids = tok.encode(expected);
  std::vector<uint8_t> sampled(ids.size(), 0);
  const int32_t stop = *tok.token_to_id(stop_text);
  auto model_turn = [&](const std::string& text) {
    auto turn = tok.encode(text);
    turn.push_back(stop);
    ids.insert(ids.end(), turn.begin(), turn.end());
    sampled.resize(ids.size(), 1);
    expected += tok.decode(turn);
    conversation.push_back({{"role", "assistant"}, {"content", text}});
  };
  model_turn(a1);
  const OJson observation = OJson::array({{{"role", "user"}, {"content", "the environment says: go on"}}});
  const RenderedDelta delta = renderer.delta(observation, stop);
  ids.insert(ids.end(), delta.ids.begin(), delta.ids.end());
  sampled.resize(ids.size(), 0);
  expected += delta.text;
  conversation.push_back(observation[0]);
  model_turn(a2);
  return renderer.check(conversation, expected, ids, sampled);
}

}  // namespace

TEST(TokenExact, TemplatesThatRerenderEarlierTurnsAreCountedApartFromDrift) {
  auto tok = std::make_shared<Tokenizer>(read_file(fs::path(RLCPP_SOURCE_DIR) / "models/arith-tiny/tokenizer.json"),
                                         read_file(fs::path(RLCPP_SOURCE_DIR) / "models/arith-tiny/tokenizer_config.json"),
                                         "arith-tiny");
  const OJson specials = {{"bos_token", ""}, {"eos_token", "<|im_end|>"}};
  // ChatML renders every prefix as a prefix of the whole: exact.
  ChatTemplate chatml(kChatMlTemplate, specials);
  EXPECT_EQ(check_with_observation(*tok, chatml, "plan|12", "34", "<|im_end|>").kind, TitoKind::kExact);
  // Planted: assistant turns before the last user turn lose what precedes '|' (as Qwen3 drops
  // their reasoning): the sequence, built turn by turn, differs by design.
  const std::string rerender =
      "{%- set ns = namespace(last_user=0) %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
      "{%- endif %}{%- endfor %}{%- for m in messages %}{%- if m.role == 'assistant' and loop.index0 < ns.last_user %}"
      "{{- '<|im_start|>assistant\\n' + m.content.split('|')[-1] + '<|im_end|>\\n' }}{%- else %}"
      "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  const TitoCheck rerendered = check_with_observation(*tok, ChatTemplate(rerender, specials), "plan|12", "34", "<|im_end|>");
  EXPECT_EQ(rerendered.kind, TitoKind::kRerender) << rerendered.detail;
  EXPECT_NE(rerendered.detail.find("the template renders"), std::string::npos);
  EXPECT_EQ(check_with_observation(*tok, ChatTemplate(rerender, specials), "12", "34", "<|im_end|>").kind, TitoKind::kExact);
  // Planted drift: a user turn's rendering depends on the assistant turn before it, so rendering
  // the new message alone after a stand-in turn gives other tokens than the whole conversation.
  const std::string drift =
      "{%- for m in messages %}{%- if m.role == 'user' and loop.index0 > 0 %}"
      "{{- '<|im_start|>user\\n' + (messages[loop.index0 - 1].content | length | string) + ':' + m.content + '<|im_end|>\\n' }}"
      "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  const TitoCheck drifted = check_with_observation(*tok, ChatTemplate(drift, specials), "12", "34", "<|im_end|>");
  EXPECT_EQ(drifted.kind, TitoKind::kMismatch) << drifted.detail;
  // A model that samples another split of its own text than the tokenizer's: the same text.
  TurnRenderer renderer(*tok, chatml, OJson::object());
  OJson conversation = OJson::array({{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "1234"}}});
  std::string expected = chatml.render(OJson::array({conversation[0]}), true);
  std::vector<int32_t> ids = tok->encode(expected);
  std::vector<uint8_t> sampled(ids.size(), 0);
  for (char ch : std::string("1234")) ids.push_back(tok->encode(std::string(1, ch))[0]);
  ids.push_back(*tok->token_to_id("<|im_end|>"));
  sampled.resize(ids.size(), 1);
  expected += "1234<|im_end|>";
  const auto canonical = tok->encode("1234");
  const TitoCheck split = renderer.check(conversation, expected, ids, sampled);
  EXPECT_EQ(split.kind, canonical.size() < 4 ? TitoKind::kNoncanonical : TitoKind::kExact) << split.detail;
}

TEST(TokenExact, Qwen3DropsTheReasoningOfTurnsBeforeTheLastUserTurn) {
  auto tok = real_tokenizer("qwen3");
  ChatTemplate qwen3(*tok);
  const TitoCheck c = check_with_observation(*tok, qwen3, "<think>\nfirst\n</think>\n\nA", "<think>\nsecond\n</think>\n\nB",
                                             "<|im_end|>");
  EXPECT_EQ(c.kind, TitoKind::kRerender) << c.detail;
}

namespace {

// A backend that answers each turn with canned text: a calculator call until the sequence holds a
// tool answer, then the answer (or, for the bad case, a malformed call every turn).
class CannedModel : public RolloutBackend {
 public:
  CannedModel(const Tokenizer& tok, bool malformed) : tok_(tok), malformed_(malformed) {}
  std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) override {
    std::vector<GeneratedSample> out;
    for (size_t r = 0; r < requests.size(); ++r) {
      for (int64_t s = 0; s < requests[r].n; ++s) {
        const std::string so_far = tok_.decode(requests[r].prompt_ids);
        const bool answered = so_far.find("<|im_start|>tool") != std::string::npos;
        std::string text = malformed_ ? "<tool_call>{\"name\": \"calculator\"</tool_call>"
                           : answered ? "It is 42."
                                      : format_tool_call("calculator", {{"expression", "6*7"}}, ToolFormat::kHermes);
        GeneratedSample g;
        g.request = static_cast<int64_t>(r);
        g.sample = s;
        g.token_ids = tok_.encode(text);
        g.token_ids.push_back(*tok_.token_to_id("<|im_end|>"));
        g.logprobs.assign(g.token_ids.size(), -0.5F);
        g.finish_reason = FinishReason::kStop;
        g.policy_version = 3;
        out.push_back(std::move(g));
      }
    }
    return out;
  }

 private:
  const Tokenizer& tok_;
  bool malformed_;
};

}  // namespace

TEST(AgentLoop, EpisodesOverABackendCarryTheirTurnsAndCounts) {
  const fs::path model_dir = fs::path(RLCPP_SOURCE_DIR) / "models/arith-tiny";
  auto tok = Tokenizer::from_dir(model_dir);
  for (bool malformed : {false, true}) {
    SCOPED_TRACE(malformed ? "malformed" : "well-formed");
    EpisodeOptions options;
    options.tools = "calculator";
    options.max_turns = 3;
    Agent agent(*tok, options, OJson::object(), nullptr, {});
    OJson messages = OJson::array({{{"role", "user"}, {"content", "What is 6*7?"}}});
    EpisodePrompt prompt;
    prompt.messages = messages;
    prompt.text = agent.chat().render(messages, true, agent.template_variables());
    prompt.ids = tok->encode(prompt.text);
    prompt.id = 5;
    SamplingParams sampling;
    sampling.max_new_tokens = 4000;  // arith-tiny spells the tool error out in hundreds of tokens
    CannedModel model(*tok, malformed);
    const auto results = run_episodes(model, agent, {prompt}, sampling, 2);
    ASSERT_EQ(results.size(), 2u);
    for (const auto& e : results) {
      EXPECT_EQ(e.summary["tito"], "exact") << e.summary.dump();
      EXPECT_EQ(e.summary["tool_calls"], malformed ? 2 : 1);
      EXPECT_EQ(e.summary["tool_errors"], malformed ? 2 : 0);
      EXPECT_EQ(e.summary["ended_by"], malformed ? "max_turns" : "answer");
      EXPECT_EQ(e.summary["n_turns"], malformed ? 3 : 2);
      EXPECT_EQ(e.sample.inserted.size(), malformed ? 2u : 1u);
      EXPECT_EQ(e.final_text, malformed ? "<tool_call>{\"name\": \"calculator\"</tool_call>" : "It is 42.");
      const auto& tool_turn = e.summary["turns"][1];
      EXPECT_EQ(tool_turn["role"], "tool");
      if (malformed) {
        EXPECT_NE(tool_turn["content"].get<std::string>().find("not valid JSON"), std::string::npos);
      } else {
        EXPECT_EQ(tool_turn["content"], "42");
      }
      for (const auto& run : e.sample.inserted) {
        for (int64_t t = run.start; t < run.start + run.length; ++t) EXPECT_EQ(e.sample.logprobs[static_cast<size_t>(t)], 0.0F);
      }
      EXPECT_EQ(e.prompt_ids, prompt.ids);
    }
  }
}
