// Where a model lives and in which dtype (always from config, never hard-coded), and the dtype
// names the flags take.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "util/enum_table.h"

namespace rlcpp {

class Communicator;

// Pipeline parallelism: the contiguous decoder layers one stage of `count` holds (train/pipeline.h
// balances them), the first stage also holding the embedding and the last the final norm and the
// head (a tied head: the embedding, on both ends). The default is the whole model.
struct PipelineStage {
  int index = 0, count = 1;                 // this stage, of how many
  int64_t layer_begin = 0, layer_end = -1;  // its decoder layers [begin, end); end -1: to the last
  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
  bool whole() const { return count == 1; }
};

// Where the model lives and in which dtype: always from config, never hard-coded.
struct ModelOptions {
  torch::Device device = torch::kCPU;         // cpu | cuda[:n]
  torch::ScalarType dtype = torch::kFloat32;  // float32 | bfloat16 | float16 | float64
  int64_t logprob_chunk_tokens = 512;         // tokens per chunk of the fused log-prob head
  // Frozen weights (the base under LoRA, a reference model) stored in this dtype and computed in
  // `dtype` (converted per layer as it runs); Undefined: stored in `dtype`.
  torch::ScalarType frozen_dtype = torch::ScalarType::Undefined;
  bool gradient_checkpointing = false;        // training forward keeps only each layer's input; backward recomputes
  // The tensor-parallel group this rank holds its part of the model in (model/tensor_parallel.h);
  // null or a group of one: the whole model here.
  std::shared_ptr<Communicator> tp_group;
  PipelineStage stage;  // the part of the decoder this model holds under pipeline parallelism
};

// float32 (fp32), bfloat16 (bf16), float16 (fp16), float64 (fp64).
const EnumTable<torch::ScalarType>& dtypes();
// A dtype flag's value; Undefined for "" (the flag's default). A bad name is a UserError naming `flag`.
torch::ScalarType dtype_or_default(const std::string& text, const std::string& flag);
// What the rollout engine's weights may be stored in (--rollout-dtype): float32, bfloat16,
// float16, and int8 and fp8 (e4m3), 8-bit with a scale per output channel, held in LibTorch as
// kChar and kByte codes (model/kernel_linear.h).
const EnumTable<torch::ScalarType>& rollout_dtypes();
torch::ScalarType rollout_dtype_or_default(const std::string& text, const std::string& flag);
// Bytes per element of a rollout_dtypes() name.
int64_t rollout_dtype_bytes(const std::string& name);
// ModelOptions from the --dtype and --device flags; bad values are UserErrors naming the flag.
ModelOptions model_options_from_flags(const std::string& dtype, const std::string& device);

}  // namespace rlcpp
