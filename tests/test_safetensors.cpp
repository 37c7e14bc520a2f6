// safetensors and checkpoint I/O: round trips for every dtype, sharding, and a named error for
// every kind of corrupt input.
#include <torch/torch.h>

#include <fstream>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/tfevents.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;
using rlcpp::testing::TempDir;

namespace {

// A file of 8-byte little-endian header length, header text, then `data` bytes.
std::filesystem::path write_raw(const TempDir& dir, const std::string& header, size_t data_bytes,
                                int64_t declared_len = -1, const std::string& name = "x.safetensors") {
  const auto path = dir / name;
  std::ofstream out(path, std::ios::binary);
  uint64_t len = declared_len < 0 ? header.size() : static_cast<uint64_t>(declared_len);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out << header;
  out << std::string(data_bytes, '\0');
  return path;
}

NamedTensors all_dtypes() {
  torch::manual_seed(0);
  return {
      {"f64", torch::randn({3, 2}, torch::kFloat64)},
      {"f32", torch::randn({4, 5})},
      {"f16", torch::randn({7}).to(torch::kFloat16)},
      {"bf16", torch::randn({2, 3, 2}).to(torch::kBFloat16)},
      {"i64", torch::arange(-5, 5, torch::kInt64)},
      {"i32", torch::arange(0, 9, torch::kInt32).view({3, 3})},
      {"i16", torch::tensor({-3, 4}, torch::kInt16)},
      {"i8", torch::tensor({-1, 2, 3}, torch::kInt8)},
      {"u8", torch::tensor({0, 255, 7}, torch::kUInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.5)},
      {"empty", torch::zeros({0, 4})},
  };
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeBitIdentical) {
  TempDir dir;
  const auto tensors = all_dtypes();
  save_safetensors(dir / "all.safetensors", tensors, {{"format", "pt"}});
  auto file = SafetensorsFile::open(dir / "all.safetensors");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    auto got = file->tensor(name);
    EXPECT_EQ(got.scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), expected.sizes()) << name;
    EXPECT_TRUE(torch::equal(got, expected)) << name;
  }
}

TEST(Safetensors, HeaderIsPaddedToEightBytesAndViewsAreAligned) {
  TempDir dir;
  save_safetensors(dir / "a.safetensors", {{"odd_name_length_x", torch::ones({3}, torch::kFloat64)}});
  std::ifstream in(dir / "a.safetensors", std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);
  auto file = SafetensorsFile::open(dir / "a.safetensors");
  auto t = file->tensor("odd_name_length_x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 8, 0u);
}

TEST(Safetensors, WritingToAViewNeverTouchesTheFile) {
  TempDir dir;
  save_safetensors(dir / "a.safetensors", {{"w", torch::zeros({16})}});
  {
    auto file = SafetensorsFile::open(dir / "a.safetensors");
    file->tensor("w").fill_(7.0f);
  }
  auto again = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_EQ(again->tensor("w").abs().sum().item<float>(), 0.0f);
}

TEST(Safetensors, ViewOutlivesTheFileObject) {
  TempDir dir;
  save_safetensors(dir / "a.safetensors", {{"w", torch::arange(10, torch::kFloat32)}});
  torch::Tensor view = SafetensorsFile::open(dir / "a.safetensors")->tensor("w");
  EXPECT_EQ(view[9].item<float>(), 9.0f);
}

TEST(SafetensorsErrors, TooShort) {
  TempDir dir;
  const auto path = dir / "short.safetensors";
  std::ofstream(path) << "abc";
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "short.safetensors", "shorter than the 8-byte");
}

TEST(SafetensorsErrors, HeaderLengthBeyondFile) {
  TempDir dir;
  auto path = write_raw(dir, "{}", 0, 1000);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "x.safetensors", "header length 1000 runs past the end");
}

TEST(SafetensorsErrors, HeaderLengthAbsurd) {
  TempDir dir;
  auto path = write_raw(dir, "{}", 0, int64_t{1} << 40);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "exceeds the limit");
}

TEST(SafetensorsErrors, NotJson) {
  TempDir dir;
  auto path = write_raw(dir, "{\"a\": [1, 2", 0);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "x.safetensors", "not valid JSON");
}

TEST(SafetensorsErrors, NotAnObject) {
  TempDir dir;
  auto path = write_raw(dir, "[1, 2]", 0);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "not an object");
}

TEST(SafetensorsErrors, UnknownDtype) {
  TempDir dir;
  auto path = write_raw(dir, R"({"w": {"dtype": "F8_E9M9", "shape": [2], "data_offsets": [0, 2]}})", 2);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "tensor \"w\"", "unsupported dtype \"F8_E9M9\"");
}

TEST(SafetensorsErrors, ShapeDoesNotMatchByteLength) {
  TempDir dir;
  auto path = write_raw(dir, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "tensor \"w\"", "need 24 bytes", "hold 20");
}

TEST(SafetensorsErrors, ShapeOverflow) {
  TempDir dir;
  auto path = write_raw(
      dir, R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 0]}})", 0);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "tensor \"w\"", "more than 2^64");
}

TEST(SafetensorsErrors, OffsetsOutOfRange) {
  TempDir dir;
  auto path = write_raw(dir, R"({"w": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})", 8);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "tensor \"w\"", "run past the data buffer (8 bytes)");
}

TEST(SafetensorsErrors, OffsetsReversed) {
  TempDir dir;
  auto path = write_raw(dir, R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}})", 8);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "tensor \"w\"", "end before they begin");
}

TEST(SafetensorsErrors, OffsetsOverlap) {
  TempDir dir;
  auto path = write_raw(dir,
                        R"({"a": {"dtype": "U8", "shape": [6], "data_offsets": [0, 6]},
                            "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                        8);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "\"a\"", "\"b\"", "overlap");
}

TEST(SafetensorsErrors, DuplicateNames) {
  TempDir dir;
  auto path = write_raw(dir,
                        R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                            "w": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                        8);
  EXPECT_THROW_MSG(SafetensorsFile::open(path), UserError, "tensor \"w\" appears twice");
}

TEST(SafetensorsErrors, MissingOrBadFields) {
  TempDir dir;
  EXPECT_THROW_MSG(SafetensorsFile::open(write_raw(dir, R"({"w": {"dtype": "U8", "shape": [4]}})", 4)), UserError,
                   "tensor \"w\"", "data_offsets");
  EXPECT_THROW_MSG(
      SafetensorsFile::open(write_raw(dir, R"({"w": {"dtype": "U8", "shape": [-4], "data_offsets": [0, 4]}})", 4)),
      UserError, "tensor \"w\"", "not a non-negative integer");
  EXPECT_THROW_MSG(
      SafetensorsFile::open(write_raw(dir, R"({"w": {"dtype": "U8", "shape": [4.5], "data_offsets": [0, 4]}})", 4)),
      UserError, "not a non-negative integer");
  EXPECT_THROW_MSG(SafetensorsFile::open(write_raw(dir, R"({"w": {"shape": [4], "data_offsets": [0, 4]}})", 4)),
                   UserError, "tensor \"w\"", "dtype");
  EXPECT_THROW_MSG(SafetensorsFile::open(write_raw(dir, R"({"__metadata__": {"a": 1}})", 0)), UserError,
                   "__metadata__ entry \"a\"");
}

TEST(SafetensorsErrors, MissingFileAndUnknownTensor) {
  TempDir dir;
  EXPECT_THROW_MSG(SafetensorsFile::open(dir / "nope.safetensors"), UserError, "nope.safetensors");
  save_safetensors(dir / "a.safetensors", {{"w", torch::zeros({2})}});
  EXPECT_THROW_MSG(SafetensorsFile::open(dir / "a.safetensors")->tensor("v"), UserError, "no tensor named \"v\"");
}

TEST(Checkpoint, ShardedSaveLoadsBackIdentical) {
  TempDir dir;
  NamedTensors tensors;
  for (int i = 0; i < 9; ++i) tensors.emplace_back(fmt::format("layer.{}.weight", i), torch::randn({64, 16}));
  const uint64_t per_tensor = 64 * 16 * 4;
  save_checkpoint(dir.path(), tensors, 3 * per_tensor);  // 9 tensors, 3 per shard
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "model-00003-of-00003.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  CheckpointReader reader(dir.path());
  EXPECT_EQ(reader.files().size(), 3u);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(torch::equal(reader.tensor(name), t)) << name;

  // Saving again unsharded replaces the shards rather than leaving a mix of two saves.
  save_checkpoint(dir.path(), tensors, 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00001-of-00003.safetensors"));
  CheckpointReader single(dir.path());
  EXPECT_EQ(single.files().size(), 1u);
}

TEST(CheckpointErrors, BrokenIndex) {
  TempDir dir;
  save_checkpoint(dir.path(), {{"a", torch::zeros({4})}, {"b", torch::zeros({4})}}, 16);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_THROW_MSG(CheckpointReader{dir.path()}, UserError, "model.safetensors.index.json",
                   "model-00002-of-00002.safetensors", "missing");

  TempDir other;
  save_safetensors(other / "model-00001-of-00001.safetensors", {{"a", torch::zeros({4})}});
  std::ofstream(other / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "model-00001-of-00001.safetensors"}})";
  EXPECT_THROW_MSG(CheckpointReader{other.path()}, UserError, "\"b\"", "does not contain it");

  std::ofstream(other / "model.safetensors.index.json") << R"({"weight_map": {"a": "../../etc/passwd"}})";
  EXPECT_THROW_MSG(CheckpointReader{other.path()}, UserError, "outside the directory");
}

TEST(CheckpointErrors, NoWeights) {
  TempDir dir;
  EXPECT_THROW_MSG(CheckpointReader{dir.path()}, UserError, "no weights in", "model.safetensors");
  EXPECT_THROW_MSG(CheckpointReader{dir / "missing"}, UserError, "does not exist");
}

// CRC-32C check values (RFC 3720 B.4 and the "123456789" check value of the Castagnoli CRC).
TEST(TfEvents, Crc32cMatchesKnownValues) {
  EXPECT_EQ(rlcpp::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(rlcpp::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(rlcpp::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}
