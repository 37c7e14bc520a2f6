// `rlcpp info MODEL_DIR`: what a Hugging Face model directory holds, without loading the weights; of
// a PEFT LoRA adapter directory, the adapter and then its base model. `rlcpp info --system`: the
// machine as rlcpp sees it (cores, the SIMD target the CPU kernels dispatch to, LibTorch's threads).
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "app/commands.h"
#include "sandbox/sandbox.h"
#include "io/checkpoint.h"
#include "kernels/matmul.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/rope.h"
#include "comm/mpi.h"
#include "util/cuda_backend.h"
#include "util/error.h"
#include "util/thread_pool.h"
#include "util/threads.h"

namespace rlcpp {

namespace {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

void run_info(const std::string& dir);

// A LoRA adapter directory: its settings and tensors, then its base model described as any model.
void run_adapter_info(const std::string& dir) {
  const PeftAdapter adapter = read_peft_adapter(dir);
  const std::filesystem::path weights = std::filesystem::path(dir) / kAdapterWeightsFile;
  if (!std::filesystem::exists(weights)) throw_user_error("{}: no {} beside adapter_config.json", dir, kAdapterWeightsFile);
  const auto file = SafetensorsFile::open(weights);
  int64_t params = 0;
  for (const auto& info : file->tensors()) params += info.numel();
  std::cout << fmt::format("adapter          {} (PEFT LoRA)\n", dir);
  std::cout << fmt::format("lora             r {}, alpha {} (scaling {}), dropout {}, targets {}{}\n", adapter.config.rank,
                           adapter.config.alpha, adapter.config.scaling(), adapter.config.dropout,
                           lora_targets_text(adapter.config.targets),
                           adapter.config.name_scope.empty() ? "" : ", name scope " + adapter.config.name_scope);
  std::cout << fmt::format("adapter weights  {} tensors, {} parameters ({:.3f} M), {}\n", file->tensors().size(), params,
                           params / 1e6, human_bytes(std::filesystem::file_size(weights)));
  std::cout << fmt::format("base model       {}\n", adapter.base_model);
  if (!std::filesystem::exists(std::filesystem::path(adapter.base_model) / "config.json")) {
    std::cout << "                 (not a model directory on this machine)\n";
    return;
  }
  std::cout << "\n";
  run_info(adapter.base_model);
}

void run_info(const std::string& dir) {
  if (is_peft_adapter_dir(dir) && !std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
    run_adapter_info(dir);
    return;
  }
  const ModelConfig c = ModelConfig::load(dir);
  CheckpointReader reader(dir);
  std::map<std::string, std::pair<int64_t, uint64_t>> by_dtype;  // dtype → (tensors, bytes)
  int64_t params_on_disk = 0;
  for (const auto& name : reader.names()) {
    const auto& info = reader.info(name);
    auto& entry = by_dtype[std::string(st_dtype_name(info.dtype))];
    entry.first += 1;
    entry.second += info.end - info.begin;
    params_on_disk += info.numel();
  }
  std::string eos;
  for (int64_t id : c.eos_token_ids) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  std::cout << fmt::format("model            {}\n", dir);
  std::cout << fmt::format("architecture     {} (model_type {})\n", c.architecture, c.model_type);
  if (c.classifier()) {
    std::cout << fmt::format("head             score: {} label(s) at the last token (a sequence classifier: a reward model)\n",
                             c.num_labels);
  }
  std::cout << fmt::format("layers           {}\n", c.num_hidden_layers);
  std::cout << fmt::format("hidden           {} (intermediate {})\n", c.hidden_size, c.intermediate_size);
  std::cout << fmt::format("heads            {} query, {} key/value (group {}), head_dim {}\n", c.num_attention_heads,
                           c.num_key_value_heads, c.num_attention_heads / c.num_key_value_heads, c.head_dim);
  std::cout << fmt::format("vocabulary       {}\n", c.vocab_size);
  std::cout << fmt::format("parameters       {} on disk ({:.3f} M), {} implied by config\n", params_on_disk,
                           params_on_disk / 1e6, c.parameter_count());
  for (const auto& [dtype, entry] : by_dtype) {
    std::cout << fmt::format("dtype            {}: {} tensors, {}\n", dtype, entry.first, human_bytes(entry.second));
  }
  std::cout << fmt::format("bytes on disk    {} in {} file(s) ({})\n", reader.bytes_on_disk(), reader.files().size(),
                           human_bytes(reader.bytes_on_disk()));
  std::cout << fmt::format("tied embeddings  {}\n", c.tie_word_embeddings ? "yes" : "no");
  std::cout << fmt::format("attention        qkv bias {}, o bias {}, q/k norm {}\n", c.qkv_bias ? "yes" : "no",
                           c.o_bias ? "yes" : "no", c.qk_norm ? "yes" : "no");
  std::cout << fmt::format("rope             theta {}, scaling {}", c.rope_theta, rope_scaling_types().name(c.rope_scaling.type));
  if (c.rope_scaling.type != RopeScalingType::kNone) std::cout << fmt::format(" (factor {})", c.rope_scaling.factor);
  std::cout << fmt::format(", max positions {}\n", c.max_position_embeddings);
  std::cout << fmt::format("rms_norm_eps     {}\n", c.rms_norm_eps);
  std::cout << fmt::format("tokens           bos {}, eos [{}]\n", c.bos_token_id, eos);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// GFLOP/s of `product` on 1024^3 (the best of 3, after one to warm up).
double gemm_rate(const std::function<void()>& product) {
  double best = 1e9;
  for (int k = 0; k < 4; ++k) {
    const auto start = std::chrono::steady_clock::now();
    product();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (k > 0) best = std::min(best, seconds);
  }
  return 2.0 * 1024 * 1024 * 1024 / best / 1e9;
}

// The BLAS LibTorch's products run on and the fp32 GEMM rate it reaches, beside rlcpp's own
// (decode-shaped) kernels on the same product.
std::string blas_description() {
  const auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  torch::Tensor c = torch::empty({1024, 1024});
  const double blas_rate = gemm_rate([&] { torch::mm_out(c, a, b); });
  const double own_rate = gemm_rate([&] {
    kernels::matmul_nt(a.data_ptr<float>(), 1024, 1024, {b.data_ptr<float>(), kernels::WeightType::f32}, 1024, nullptr,
                       c.data_ptr<float>(), &ThreadPool::global());
  });
  return fmt::format("blas             {} (LibTorch's), fp32 GEMM 1024^3 {:.0f} GFLOP/s (rlcpp's kernels {:.0f})",
                     at::hasMKL() ? "MKL" : "LibTorch's own", blas_rate, own_rate);
}

void system_info() {
  std::cout << fmt::format("cpu              {} ({} hardware threads)\n", cpu_model(), std::thread::hardware_concurrency());
  std::cout << fmt::format("kernels          {} (dispatched at run time; this CPU supports {})\n", kernels::dispatch_target(),
                           kernels::supported_targets());
  std::cout << fmt::format("dot products     bf16 weights: {}; int8 weights: {} ($RLCPP_DOT_INSTRUCTIONS=0: widened)\n",
                           kernels::bf16_dot_products() ? "AVX512-BF16, x rounded to bf16" : "widened to fp32",
                           kernels::int8_dot_products() ? "AVX512-VNNI, x quantized to int16"
                                                        : "widened to fp32");
  std::cout << fmt::format("kernel threads   {} ($RLCPP_KERNEL_THREADS)\n", ThreadPool::global().size());
  const std::string no_cuda = load_cuda_backend();
  std::cout << fmt::format("libtorch         {}, {} intra-op thread(s), CUDA {}\n", TORCH_VERSION, at::get_num_threads(),
                           no_cuda.empty() ? fmt::format("{} device(s)", torch::cuda::device_count())
                                           : fmt::format("no: {}", no_cuda));
  std::cout << fmt::format("mpi              {}\n", built_with_mpi() ? "built with MPI: mpirun starts runs of several processes"
                                                                 : "built without MPI: every run is one process");
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  const char* chosen = std::getenv("RLCPP_OMP_WAIT_CHOSEN");
  std::cout << fmt::format("openmp waits     {}\n", wait == nullptr ? "the library's default (threads spin a while)"
                                                   : chosen != nullptr ? fmt::format("{} (set by rlcpp: {})", wait, chosen)
                                                                       : std::string(wait));
  std::cout << blas_description() << "\n";
  std::cout << sandbox_isolation().describe() << "\n";  // what -rt code's programs run under here
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "describe a Hugging Face model directory (shape, dtypes, size, rope), or --system");
  auto dir = std::make_shared<std::string>();
  auto system = std::make_shared<bool>(false);
  cmd->add_option("model_dir", *dir, "model directory (config.json + *.safetensors), or a LoRA adapter directory");
  cmd->add_flag("--system", *system, "describe this machine: cores, the CPU kernels' SIMD target, LibTorch threads");
  cmd->callback([dir, system] {
    if (*system) system_info();
    if (!dir->empty()) {
      if (*system) std::cout << "\n";
      run_info(*dir);
    } else if (!*system) {
      throw_user_error("info: give a model directory (rlcpp info MODEL_DIR) or --system");
    }
  });
}

}  // namespace rlcpp
