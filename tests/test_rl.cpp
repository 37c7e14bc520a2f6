// The rl layer's pieces on their own (the end-to-end scripts run them together): the sample record
// and its serialised form (train/sample.h, which every rl piece carries), the staleness policy,
// the step buffer, rollout figures, ChatLearn's relay buffer, the metrics rewind.
#include <fstream>
#include <sstream>

#include "rl/checkpoint/run_checkpoint.h"
#include "rl/rollout/relay_buffer.h"
#include "rl/rollout/rollout.h"
#include "rl/rollout/rollout_source.h"
#include "rl/rollout/judge_reward.h"
#include "rl/run/run_state.h"
#include "rl/step/critic.h"
#include "test_util.h"
#include "util/error.h"
#include "util/file.h"

using namespace rlcpp;

namespace {

// A group of `n` samples whose values all differ, so a field dropped or swapped shows.
SampleGroup group(int64_t line, int n, int64_t version = 3) {
  SampleGroup g;
  g.prompt = "prompt " + std::to_string(line);
  g.gt_answer = std::to_string(line * 7);
  g.line = line;
  g.id = 100 + line;
  g.trained_step = 0;
  for (int k = 0; k < n; ++k) {
    const std::vector<int32_t> response(static_cast<size_t>(k + 1), static_cast<int32_t>(10 + k));
    Sample s = model_sample({1, 2, static_cast<int32_t>(line)}, response, 0.25 * k - 0.5,
                            std::vector<float>(response.size(), -0.125f * static_cast<float>(k + 1)), version, k % 2 == 1);
    s.reward = k;
    s.reward_parts = {{"accuracy", 0.5 * k}};
    s.correct = k % 3 == 0;
    s.response = "response " + std::to_string(k);
    s.group_id = g.id;
    g.samples.push_back(s);
  }
  return g;
}

void expect_same(const SampleGroup& a, const SampleGroup& b) {
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.gt_answer, b.gt_answer);
  EXPECT_EQ(a.line, b.line);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.trained_step, b.trained_step);
  EXPECT_EQ(a.policy_version(), b.policy_version());
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t k = 0; k < a.samples.size(); ++k) {
    const Sample &x = a.samples[k], &y = b.samples[k];
    EXPECT_EQ(x.prompt_ids, y.prompt_ids);
    EXPECT_EQ(x.response_ids, y.response_ids);
    EXPECT_EQ(x.segments, y.segments);
    EXPECT_EQ(x.advantages, y.advantages);  // exactly: checkpoints resume bit for bit
    EXPECT_EQ(x.truncated, y.truncated);
    EXPECT_EQ(x.rollout_logprobs, y.rollout_logprobs);
    EXPECT_EQ(x.reward, y.reward);
    EXPECT_EQ(x.reward_parts, y.reward_parts);
    EXPECT_EQ(x.correct, y.correct);
    EXPECT_EQ(x.response, y.response);
    EXPECT_EQ(x.group_id, y.group_id);
  }
}

}  // namespace

TEST(SampleGroup, SurvivesItsJsonFormExactly) {
  SampleGroup g = group(5, 4);
  g.trained_step = 9;
  g.samples[1].set_advantage(0.1 + 0.2);  // not a short decimal: the text form must keep every bit
  // A multi-turn sample: a tool's output inserted, then tokens sampled after a weight update, with
  // per-token advantages.
  Sample& s = g.samples[2];
  s.append(SegmentKind::kInserted, {40, 41}, {}, 3);
  s.append(SegmentKind::kModel, {42}, {-0.0625f}, 4);
  s.advantages = {0.5, 0.25, 0.125, 0.0, 0.1 + 0.7, -1.0};
  check_sample(s, "the test's sample");
  const SampleGroup back = group_from_json(nlohmann::json::parse(to_json(g).dump()));
  expect_same(g, back);
  // The binary message form too.
  expect_same(g, group_from_json(nlohmann::json::from_msgpack(nlohmann::json::to_msgpack(to_json(g)))));
}

TEST(SampleGroup, GroupsSavedBeforeSegmentsReadBack) {
  // A checkpoint's group as written before samples had segments: the version on the group, one
  // advantage per sample, no reward parts.
  const auto old = nlohmann::json::parse(R"({"prompt_ids": [1, 2], "prompt": "p", "gt_answer": "4", "line": 3,
      "policy_version": 6, "trained_step": 2, "samples": [
      {"response_ids": [7, 8, 9], "advantage": -0.5, "truncated": true, "rollout_logprobs": [-0.5, -0.25, -1.0],
       "reward": 0.0, "correct": false, "response": "x"},
      {"response_ids": [5], "advantage": 0.5, "truncated": false, "rollout_logprobs": [],
       "reward": 1.0, "correct": true, "response": "4"}]})");
  const SampleGroup g = group_from_json(old);
  ASSERT_EQ(g.samples.size(), 2u);
  EXPECT_EQ(g.policy_version(), 6);
  EXPECT_EQ(g.trained_step, 2);
  const Sample& s = g.samples[0];
  EXPECT_EQ(s.prompt_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(s.segments, (std::vector<Segment>{{SegmentKind::kModel, 3, 6}}));
  EXPECT_EQ(s.advantages, (std::vector<double>{-0.5}));
  EXPECT_EQ(s.loss_mask(), (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_TRUE(s.truncated);
  EXPECT_TRUE(g.samples[1].correct);
  EXPECT_TRUE(g.samples[1].rollout_logprobs.empty());
}

TEST(SampleGroup, ABrokenSampleIsRefusedNamingIt) {
  auto j = to_json(group(4, 2));
  j["samples"][1]["segments"][0][1] = 7;  // covers 7 of its 2 tokens
  EXPECT_THROW_MSG(group_from_json(j), InternalError, "dataset line 4", "segments cover 7 of 2");
  j = to_json(group(4, 2));
  j["samples"][0]["advantages"] = {1.0, 2.0};  // neither one nor one per token (1 token)
  EXPECT_THROW_MSG(group_from_json(j), InternalError, "2 advantages for 1 response tokens");
  j = to_json(group(4, 2));
  j["samples"][0]["segments"][0][0] = "tool";
  EXPECT_THROW_MSG(group_from_json(j), InternalError, "unknown kind \"tool\"");
}

TEST(Sample, SegmentsGiveTheLossMaskAndVersions) {
  Sample s = model_sample({1}, {10, 11}, 1.0, {-0.5f, -0.25f}, 2);
  s.append(SegmentKind::kModel, {12}, {-1.0f}, 2);  // the same version: joins the segment
  s.append(SegmentKind::kInserted, {20, 21, 22}, {}, 2);
  s.append(SegmentKind::kModel, {13, 14}, {-0.125f, -2.0f}, 3);
  EXPECT_EQ(s.segments, (std::vector<Segment>{{SegmentKind::kModel, 3, 2}, {SegmentKind::kInserted, 3, 2},
                                               {SegmentKind::kModel, 2, 3}}));
  EXPECT_EQ(s.response_ids, (std::vector<int32_t>{10, 11, 12, 20, 21, 22, 13, 14}));
  EXPECT_EQ(s.loss_mask(), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0, 1, 1}));
  EXPECT_EQ(s.token_versions(), (std::vector<int64_t>{2, 2, 2, 2, 2, 2, 3, 3}));
  EXPECT_EQ(s.rollout_logprobs, (std::vector<float>{-0.5f, -0.25f, -1.0f, 0, 0, 0, -0.125f, -2.0f}));
  EXPECT_EQ(s.trained_tokens(), 5);
  EXPECT_EQ(s.policy_version(), 2);
  EXPECT_FALSE(s.single_version());
  EXPECT_EQ(s.advantage(6), 1.0);  // one advantage: every token's
  s.advantages = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(s.advantage(6), 6.0);
  check_sample(s, "the test's sample");
  // A sample that kept no log-probs keeps none.
  Sample bare = model_sample({1}, {10}, 0.0);
  bare.append(SegmentKind::kInserted, {11}, {}, 0);
  EXPECT_TRUE(bare.rollout_logprobs.empty());
  // The group's version is its oldest sample's.
  SampleGroup g;
  g.samples = {s, model_sample({1}, {9}, 0.0, {}, 1), Sample{}};  // an empty sample has no version to count
  EXPECT_EQ(g.policy_version(), 1);
  EXPECT_EQ(g.response_tokens(), 9);
}

TEST(Sample, MarkStaleKeepsOldTokensAsContextOnly) {
  // Versions 2, then an inserted run, then 3 and 4: --max-staleness lets version 3 on be trained.
  Sample s = model_sample({1}, {10, 11}, 1.0, {-0.5f, -0.25f}, 2);
  s.append(SegmentKind::kInserted, {20}, {}, 2);
  s.append(SegmentKind::kModel, {12, 13}, {-1.0f, -0.75f}, 3);
  s.append(SegmentKind::kModel, {14}, {-2.0f}, 4);
  EXPECT_EQ(s.mark_stale(3), 2);
  EXPECT_EQ(s.mark_stale(3), 0);  // already marked
  EXPECT_EQ(s.segments, (std::vector<Segment>{{SegmentKind::kStale, 2, 2}, {SegmentKind::kInserted, 1, 2},
                                               {SegmentKind::kModel, 2, 3}, {SegmentKind::kModel, 1, 4}}));
  EXPECT_EQ(s.loss_mask(), (std::vector<uint8_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(s.rollout_logprobs[1], -0.25f);  // the sampler's log-probs stay with the context
  EXPECT_EQ(s.trained_tokens(), 3);
  EXPECT_EQ(s.policy_version(), 3);  // the oldest trained token's
  EXPECT_FALSE(s.single_version());
  // Kept through the one serialised form.
  SampleGroup g;
  g.prompt = "p";
  g.samples = {s};
  EXPECT_EQ(group_from_json(nlohmann::json::from_msgpack(nlohmann::json::to_msgpack(to_json(g)))).samples[0].segments,
            s.segments);
  // A sample with nothing left to train does not make its group older; a group with nothing left
  // to train is as old as its oldest sample.
  Sample old = model_sample({1}, {9}, 0.0, {}, 1);
  EXPECT_EQ(old.mark_stale(3), 1);
  g.samples = {s, old};
  EXPECT_EQ(g.policy_version(), 3);
  g.samples = {old};
  EXPECT_EQ(g.policy_version(), 1);
}

TEST(SampleGroup, TakeGroupsTakesFromTheFrontInOrder) {
  std::deque<SampleGroup> buffer;
  for (int64_t line = 1; line <= 5; ++line) buffer.push_back(group(line, 2));
  const auto first = take_groups(buffer, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].line, 1);
  EXPECT_EQ(first[1].line, 2);
  EXPECT_EQ(buffer.size(), 3u);
  const auto rest = take_groups(buffer, 10);  // fewer left than asked: all of them
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[2].line, 5);
  EXPECT_TRUE(buffer.empty());
  EXPECT_TRUE(take_groups(buffer, 1).empty());
}

TEST(RolloutStats, CountsAndMeansOverTheSamples) {
  RolloutStats stats;
  stats.add(group(1, 3));  // lengths 1, 2, 3; rewards 0, 1, 2; correct 1, 0, 0; truncated 0, 1, 0
  stats.add(group(2, 1));  // length 1, reward 0, correct, not truncated
  EXPECT_EQ(stats.samples, 4);
  EXPECT_EQ(stats.correct, 2);
  EXPECT_EQ(stats.truncated, 1);
  EXPECT_EQ(stats.max_len, 3);
  EXPECT_DOUBLE_EQ(stats.mean(stats.reward_sum), 3.0 / 4);
  EXPECT_DOUBLE_EQ(stats.mean(stats.len_sum), 7.0 / 4);
  EXPECT_DOUBLE_EQ(RolloutStats{}.mean(1.0), 0.0);
}

TEST(PromptPick, SurvivesItsJsonForm) {
  const PromptPick p{{4, 5, 6}, "the text", "42", 17, 0xfedcba9876543210ULL, 33};
  const PromptPick back = pick_from_json(nlohmann::json::parse(to_json(p).dump()));
  EXPECT_EQ(back.ids, p.ids);
  EXPECT_EQ(back.text, p.text);
  EXPECT_EQ(back.gt_answer, p.gt_answer);
  EXPECT_EQ(back.line, p.line);
  EXPECT_EQ(back.seed, p.seed);  // all 64 bits
  EXPECT_EQ(back.id, p.id);
}

// A round cut at a checkpoint, as the checkpoint keeps it: every sample's tokens, log-probs, top
// log-probs, text, finish, versions and pieces, and the weight switches with their cuts.
TEST(RoundProgress, SurvivesItsJsonFormExactly) {
  RoundProgress p;
  p.calls_started = 2;
  for (int k = 0; k < 3; ++k) {
    RoundProgress::Piece piece;
    GeneratedSample& g = piece.sample.out;
    g.token_ids.assign(static_cast<size_t>(k), 40 + k);
    g.logprobs.assign(static_cast<size_t>(k), -0.1f * static_cast<float>(k) - 1e-7f);
    if (k == 2) g.top_logprobs = {{{3, -0.5f}, {4, -1.25f}}, {{5, -0.3333333f}}};
    g.text = "t\u00e9" + std::to_string(k);
    g.finish_reason = k == 1 ? FinishReason::kAbort : FinishReason::kStop;
    g.policy_version = 7 + k;
    if (k == 2) g.version_changes = {{1, 10}};
    piece.sample.pieces = k;
    piece.done = k != 1;
    p.samples.push_back(piece);
  }
  const auto back = round_progress_from_json(nlohmann::json::parse(to_json(p).dump()), "test");
  EXPECT_EQ(back.calls_started, 2);
  ASSERT_EQ(back.samples.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const auto &a = p.samples[k], &b = back.samples[k];
    EXPECT_EQ(a.sample.out.token_ids, b.sample.out.token_ids);
    EXPECT_EQ(a.sample.out.logprobs, b.sample.out.logprobs);
    ASSERT_EQ(a.sample.out.top_logprobs.size(), b.sample.out.top_logprobs.size());
    for (size_t t = 0; t < a.sample.out.top_logprobs.size(); ++t) {
      for (size_t e = 0; e < a.sample.out.top_logprobs[t].size(); ++e) {
        EXPECT_EQ(a.sample.out.top_logprobs[t][e].token, b.sample.out.top_logprobs[t][e].token);
        EXPECT_EQ(a.sample.out.top_logprobs[t][e].logprob, b.sample.out.top_logprobs[t][e].logprob);
      }
    }
    EXPECT_EQ(a.sample.out.text, b.sample.out.text);
    EXPECT_EQ(a.sample.out.finish_reason, b.sample.out.finish_reason);
    EXPECT_EQ(a.sample.out.policy_version, b.sample.out.policy_version);
    EXPECT_EQ(a.sample.out.version_changes, b.sample.out.version_changes);
    EXPECT_EQ(a.sample.pieces, b.sample.pieces);
    EXPECT_EQ(a.done, b.done);
  }
  WeightSwitches w;
  w.during_round = true;
  w.start_after = 1;
  w.at = {4, 8};
  w.cuts = {2};
  const auto wb = switches_from_json(nlohmann::json::parse(to_json(w).dump()));
  EXPECT_EQ(wb.at, w.at);
  EXPECT_EQ(wb.cuts, w.cuts);
  EXPECT_EQ(wb.start_after, 1);
  EXPECT_TRUE(wb.during_round);
  EXPECT_FALSE(wb.asap);
  EXPECT_THROW(round_progress_from_json(nlohmann::json{{"calls_started", 1}}, "test"), InternalError);

  // In a checkpoint's state.json: read back whole, and a damaged record refused naming the file.
  nlohmann::json record = {{"switches", to_json(w)}, {"picks", nlohmann::json::array()}, {"taken", 1}, {"step", 3},
                           {"version", 2}, {"progress", to_json(p)}, {"graded", nullptr}};
  nlohmann::json state = {{"step", 3}, {"optimizer_steps", 3}, {"round", {{"in_flight", {record}}}}};
  const auto saved = checkpoint_state_from_json(state, "runs/x/step-3/trainer_state/state.json");
  ASSERT_EQ(saved.round.in_flight.size(), 1u);
  EXPECT_EQ(saved.round.in_flight[0], record);
  for (const char* damage : {"taken", "progress"}) {
    auto broken = state;
    broken["round"]["in_flight"][0][damage] = "?";
    try {
      checkpoint_state_from_json(broken, "runs/x/step-3/trainer_state/state.json");
      ADD_FAILURE() << "a damaged " << damage << " was read";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("runs/x/step-3/trainer_state/state.json"), std::string::npos) << e.what();
    }
  }
  state["round"]["in_flight"][0]["progress"]["samples"][0].erase("tokens");
  EXPECT_THROW(checkpoint_state_from_json(state, "state.json"), UserError);
}

TEST(RoundInFlight, SurvivesItsJsonFormWithEitherSourceAndAGradedRound) {
  RoundInFlight r;
  r.source = "servers";
  r.picks = {PromptPick{{1, 2, 3}, "2+2", "4", 7, 99, 12}};
  r.switches.during_round = true;
  r.switches.at = {36};
  r.switches.cuts = {1};
  r.taken = 1;
  r.step = 36;
  r.call_end = 48;
  r.version = 5;
  r.graded.emplace();
  r.graded->kept = {group(3, 2)};
  r.graded->discarded = {group(4, 2, 1)};
  r.graded->generate_seconds = 0.5;
  const RoundInFlight back = round_in_flight_from_json(nlohmann::json::parse(to_json(r).dump()), "test");
  EXPECT_EQ(back.source, "servers");
  ASSERT_EQ(back.picks.size(), 1u);
  EXPECT_EQ(back.picks[0].ids, r.picks[0].ids);
  EXPECT_EQ(back.picks[0].id, 12);
  EXPECT_EQ(back.switches.at, r.switches.at);
  EXPECT_EQ(back.switches.cuts, r.switches.cuts);
  EXPECT_EQ(back.taken, 1);
  EXPECT_EQ(back.step, 36);
  EXPECT_EQ(back.call_end, 48);
  EXPECT_EQ(back.version, 5);
  EXPECT_FALSE(back.progress.has_value());
  ASSERT_TRUE(back.graded.has_value());
  ASSERT_EQ(back.graded->kept.size(), 1u);
  ASSERT_EQ(back.graded->discarded.size(), 1u);
  expect_same(back.graded->kept[0], r.graded->kept[0]);
  expect_same(back.graded->discarded[0], r.graded->discarded[0]);
  EXPECT_EQ(back.graded->generate_seconds, 0.5);
  // A record from before rollout servers cut rounds is a rollout worker's.
  auto old = to_json(r);
  old.erase("source");
  old.erase("call_end");
  EXPECT_EQ(round_in_flight_from_json(old, "test").source, "engine");
  old["source"] = "elsewhere";
  EXPECT_THROW(round_in_flight_from_json(old, "test"), InternalError);
}

TEST(RelayBuffer, RelaysTheLastStepsGroupsAfterTheOffset) {
  StalenessOptions c;
  c.max_relay_episode = 2;
  c.relay_episode_offset = 1;
  RelayBuffer relay(c, {});
  ASSERT_TRUE(relay.enabled());
  EXPECT_TRUE(relay.relayed(1).empty());
  relay.add(1, {group(1, 2), group(2, 2)});
  EXPECT_TRUE(relay.relayed(1).empty());  // step <= offset: nothing relayed yet
  ASSERT_EQ(relay.relayed(2).size(), 2u);
  EXPECT_EQ(relay.relayed(2)[0].trained_step, 1);  // tagged with the step that trained on it
  relay.add(2, {group(3, 2)});
  relay.add(3, {group(4, 2)});  // the groups of step 1 are now older than the last two steps
  const auto held = relay.relayed(4);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].line, 3);
  EXPECT_EQ(held[1].line, 4);
  // A checkpoint's groups come back as they were.
  RelayBuffer again(c, relay.groups());
  ASSERT_EQ(again.relayed(4).size(), 2u);
  expect_same(again.relayed(4)[1], held[1]);
}

TEST(RelayBuffer, MinusOneKeepsEveryStepAndZeroIsOff) {
  StalenessOptions all;
  all.max_relay_episode = -1;
  RelayBuffer keep(all, {});
  for (int64_t step = 1; step <= 5; ++step) keep.add(step, {group(step, 1)});
  EXPECT_EQ(keep.relayed(6).size(), 5u);
  StalenessOptions off;
  RelayBuffer none(off, {});
  EXPECT_FALSE(none.enabled());
  none.add(1, {group(1, 1)});
  EXPECT_TRUE(none.relayed(2).empty());
  EXPECT_TRUE(none.groups().empty());
}

TEST(RunCheckpoint, RewindMovesLaterStepsAsideAndLosesNothing) {
  rlcpp::testing::TempDir dir;
  const auto metrics = dir / "metrics.jsonl";
  std::ofstream(metrics) << "{\"step\": 1, \"loss\": 0.5}\n{\"step\": 2, \"loss\": 0.4}\n"
                            "{\"step\": 3, \"loss\": 0.3}\n{\"step\": 4, \"loss\": 0.2}\n";
  rewind_metrics(metrics, 2);
  EXPECT_EQ(read_file(metrics), "{\"step\": 1, \"loss\": 0.5}\n{\"step\": 2, \"loss\": 0.4}\n");
  EXPECT_EQ(read_file(dir / "metrics.discarded.jsonl"), "{\"step\": 3, \"loss\": 0.3}\n{\"step\": 4, \"loss\": 0.2}\n");
  rewind_metrics(metrics, 2);  // nothing later: nothing moves
  EXPECT_EQ(read_file(dir / "metrics.discarded.jsonl"), "{\"step\": 3, \"loss\": 0.3}\n{\"step\": 4, \"loss\": 0.2}\n");
  rewind_metrics(dir / "absent.jsonl", 0);  // no file: nothing to do
}

// A run that ended (its status line last) and is resumed goes on: the status line is set aside with
// the steps after the checkpoint, and the resumed run writes its own at its end.
TEST(RunCheckpoint, RewindSetsTheEndedRunsStatusLineAside) {
  rlcpp::testing::TempDir dir;
  const auto metrics = dir / "metrics.jsonl";
  std::ofstream(metrics) << "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n{\"status\": \"failed\", \"steps\": 3, \"error\": \"x\"}\n";
  rewind_metrics(metrics, 3);  // resumed from the last step: only the status line goes
  EXPECT_EQ(read_file(metrics), "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n");
  EXPECT_EQ(read_file(dir / "metrics.discarded.jsonl"), "{\"status\": \"failed\", \"steps\": 3, \"error\": \"x\"}\n");
}

TEST(RunCheckpoint, AFreshRunRefusesADirectoryThatHoldsARun) {
  rlcpp::testing::TempDir dir;
  RunConfig c;
  std::ofstream(dir / "metrics.jsonl") << "{\"step\": 1}\n";
  EXPECT_THROW_MSG(prepare_metrics_file(dir.path(), c, std::nullopt), UserError, "already holds a run", "--resume auto");
  c.runtime.resume = "auto";  // killed before its first checkpoint: starts over, the old lines set aside
  prepare_metrics_file(dir.path(), c, std::nullopt);
  EXPECT_EQ(read_file(dir / "metrics.discarded.jsonl"), "{\"step\": 1}\n");
}

TEST(StalenessPolicy, RoundsGoAheadOnlyFromAConcurrentSourceAndPublishOnCadence) {
  StalenessOptions c;
  c.n_behind = 2;
  c.sync_frequency = 2;
  StalenessPolicy workers(c, /*concurrent=*/true, /*rounds_ahead=*/0);
  EXPECT_TRUE(workers.ahead(3, 10));
  EXPECT_FALSE(workers.ahead(10, 10));  // the last round's steps: nothing left to generate ahead
  // Rounds ahead publish every second time; a round not ahead always publishes (a no-op when the
  // generators hold the policy already).
  EXPECT_FALSE(workers.publish_before(true));
  EXPECT_TRUE(workers.publish_before(true));
  EXPECT_FALSE(workers.publish_before(true));
  EXPECT_TRUE(workers.publish_before(false));
  EXPECT_EQ(workers.rounds_ahead(), 3);
  StalenessPolicy resumed(c, true, workers.rounds_ahead());  // a checkpoint's count keeps the cadence
  EXPECT_TRUE(resumed.publish_before(true));
  // The engine over the policy's own weights cannot generate while it trains: never ahead.
  EXPECT_FALSE(StalenessPolicy(c, /*concurrent=*/false, 0).ahead(3, 10));
  c.n_behind = 0;  // -nb 0: on-policy rounds
  EXPECT_FALSE(StalenessPolicy(c, true, 0).ahead(3, 10));
}

TEST(Critic, TokenRewardsAndGaeOverTheTrainedTokensOnly) {
  // Two model tokens, a tool's two inserted tokens, one more model token; reward 2.
  Sample multi = model_sample({1, 2}, {3, 4}, 0.0);
  multi.append(SegmentKind::kInserted, {5, 6}, {}, 0);
  multi.append(SegmentKind::kModel, {7}, {}, 0);
  multi.reward = 2.0;
  Sample single = model_sample({1}, {8, 9}, 0.0);
  single.reward = -1.0;
  std::vector<Sample> samples = {multi, single};
  const std::vector<std::vector<float>> old = {{-1.0f, -0.5f, 0.0f, 0.0f, -2.0f}, {-0.25f, -1.0f}};
  const std::vector<std::vector<float>> ref = {{-1.5f, -0.5f, -9.0f, -9.0f, -1.0f}, {-0.25f, -0.5f}};
  // The reward on the last trained token; inserted tokens get nothing.
  auto r = token_rewards(samples, old, {}, 0);
  EXPECT_EQ(r[0], (std::vector<double>{0, 0, 0, 0, 2}));
  EXPECT_EQ(r[1], (std::vector<double>{0, -1}));
  // KL in the reward: −β (old − ref) on every trained token, the inserted ones' log-probs unread.
  r = token_rewards(samples, old, ref, 0.5);
  EXPECT_EQ(r[0], (std::vector<double>{-0.25, 0, 0, 0, 2 + 0.5}));
  EXPECT_EQ(r[1], (std::vector<double>{0, -1 + 0.25}));
  EXPECT_THROW(token_rewards(samples, old, {}, 0.5), InternalError);
  // GAE over the trained tokens (3 of sample 0), γ 1 λ 1: A_t = Σ rewards to come − V_t.
  r = token_rewards(samples, old, {}, 0);
  const std::vector<std::vector<float>> values = {{0.5f, 1.0f, 99.0f, 99.0f, 1.5f}, {0.25f, -0.5f}};
  PpoConfig ppo;
  ppo.lam = 1;
  const auto targets = critic_targets(samples, values, r, ppo);
  EXPECT_EQ(samples[0].advantages, (std::vector<double>{1.5, 1.0, 0, 0, 0.5}));
  EXPECT_EQ(targets.returns[0], (std::vector<double>{2, 2, 0, 0, 2}));
  EXPECT_EQ(samples[1].advantages, (std::vector<double>{-1.25, -0.5}));
  EXPECT_EQ(targets.returns[1], (std::vector<double>{-1, -1}));
  EXPECT_EQ(targets.metrics.at("critic_tokens"), 5);
  // With γ < 1 the inserted tokens are not steps: the discount is per trained token.
  std::vector<Sample> again = {multi};
  ppo.gamma = 0.5;
  critic_targets(again, {values[0]}, {r[0]}, ppo);
  // A2 = 2 − 1.5 = 0.5; A1 = 0 + 0.5·1.5 − 1 + 0.5·0.5 = 0; A0 = 0 + 0.5·1 − 0.5 + 0.5·0 = 0.
  EXPECT_EQ(again[0].advantages, (std::vector<double>{0, 0, 0, 0, 0.5}));
  for (const auto& s : again) check_sample(s, "a sample with GAE advantages");
  // A truncated sequence ends its trajectory as a finished one does: its reward (the grade of the
  // response as it stands) is the whole return, nothing follows to bootstrap from.
  std::vector<Sample> cut = {multi};
  cut[0].truncated = true;
  critic_targets(cut, {values[0]}, {r[0]}, ppo);
  EXPECT_EQ(cut[0].advantages, again[0].advantages);
}

TEST(Judge, TemplateFieldsAndScores) {
  rlcpp::testing::TempDir dir;
  const auto path = dir.path() / "judge.txt";
  std::ofstream(path) << "Q: {prompt}\nA*: {answer}\nR: {response}\n{unknown} stays.";
  JudgeOptions options;
  options.url = "http://127.0.0.1:9";  // never reached here
  options.template_path = path.string();
  const JudgeReward judge(options);
  RewardInput input;
  input.prompt = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>";
  input.messages = nlohmann::json::array({{{"role", "system"}, {"content", "Be brief."}},
                                          {{"role", "user"}, {"content", "What is 2 + 3?"}}});
  input.response = "It is {answer}: 5";  // a field inside a filled-in value stays as written
  input.gt_answer = "5";
  EXPECT_EQ(judge.judge_prompt(input), "Q: What is 2 + 3?\nA*: 5\nR: It is {answer}: 5\n{unknown} stays.");
  input.messages = nlohmann::json::array();  // no messages: the prompt's text
  EXPECT_EQ(judge.judge_prompt(input).substr(0, 10), "Q: <|im_st");
  // The last number, by default; none: no score.
  EXPECT_EQ(judge.parse_score("Clear and right. 8/10, so: 8.5"), 8.5);
  EXPECT_EQ(judge.parse_score("Score: -2"), -2.0);
  EXPECT_FALSE(judge.parse_score("I cannot tell.").has_value());
  options.pattern = "Score: ([0-9]+)";
  const JudgeReward with_pattern(options);
  EXPECT_EQ(with_pattern.parse_score("Score: 7. Out of 10."), 7.0);
  EXPECT_FALSE(with_pattern.parse_score("7 out of 10").has_value());
  // Refused by name: a pattern without a group, a bad pattern, a template without {response}.
  options.pattern = "Score: [0-9]+";
  EXPECT_THROW_MSG(JudgeReward{options}, UserError, "--judge-pattern", "in a group");
  options.pattern = "Score: ([0-9]+";
  EXPECT_THROW_MSG(JudgeReward{options}, UserError, "--judge-pattern", "not a regular expression");
  options.pattern.clear();
  std::ofstream(path) << "Rate it.";
  EXPECT_THROW_MSG(JudgeReward{options}, UserError, "--judge-template", "no {response}");
  options.template_path = (dir.path() / "none.txt").string();
  EXPECT_THROW_MSG(JudgeReward{options}, UserError, "--judge-template", "none.txt");
}
