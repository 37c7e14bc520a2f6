// The model's own autograd functions: activation checkpointing of a decoder layer, ZeRO-2's
// gradient tap at a layer's input, a trained embedding whose backward adds its rows into .grad,
// and a linear layer over a frozen weight stored in another dtype. Included by the files that
// assemble the model (layers.cpp, transformer.cpp) only.
#pragma once

#include <torch/autograd.h>

#include <vector>

#include "model/transformer.h"

namespace rlcpp {

// Activation checkpointing of one decoder layer: the forward runs without a graph and keeps only
// the layer's input; the backward runs the layer again with a graph (the RNG replayed, so dropout
// draws the same mask) and differentiates it. The layer's trainable parameters are inputs, so
// their gradients flow even when x needs none (the first layer under LoRA).
struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, torch::TensorList params,
                               DecoderLayerImpl* layer, const torch::Tensor& cos, const torch::Tensor& sin,
                               const AttentionMask& mask, ParameterHolder* holder, bool adapters, const Transformer* model) {
    ctx->save_for_backward({x});
    ctx->saved_data["holder"] = reinterpret_cast<int64_t>(holder);
    ctx->saved_data["adapters"] = adapters;
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["mask"] = mask.keys;
    ctx->saved_data["sequences"] = mask.sequences;
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["x_grad"] = x.requires_grad();
    ctx->saved_data["n_params"] = static_cast<int64_t>(params.size());
    auto generator = at::globalContext().defaultGenerator(x.device());
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      ctx->saved_data["rng"] = generator.get_state();
    }
    std::vector<torch::Tensor> kept(params.begin(), params.end());
    ctx->saved_data["params"] = c10::List<torch::Tensor>(kept);
    // With a holder, the parameters were gathered for apply.
    return layer->forward(x, cos, sin, mask, ForwardContext{adapters, holder, {}});
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto x = ctx->get_saved_variables()[0];
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const bool x_grad = ctx->saved_data["x_grad"].toBool();
    auto params_list = ctx->saved_data["params"].toTensorList();
    std::vector<torch::Tensor> params(params_list.begin(), params_list.end());
    auto generator = at::globalContext().defaultGenerator(x.device());
    torch::Tensor rng_now;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      rng_now = generator.get_state();
      generator.set_state(ctx->saved_data["rng"].toTensor());
    }
    auto* holder = reinterpret_cast<ParameterHolder*>(ctx->saved_data["holder"].toInt());
    if (holder != nullptr) holder->gather(params);
    torch::Tensor out;
    auto input = x.detach().requires_grad_(x_grad);
    {
      torch::AutoGradMode grad(true);
      out = layer->forward(input, ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(),
                           AttentionMask(ctx->saved_data["mask"].toTensor(), ctx->saved_data["sequences"].toIntVector()),
                           ForwardContext{ctx->saved_data["adapters"].toBool(), holder, {}});
    }
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng_now);
    }
    std::vector<torch::Tensor> wrt;
    if (x_grad) wrt.push_back(input);
    wrt.insert(wrt.end(), params.begin(), params.end());
    torch::autograd::variable_list grads;
    if (!wrt.empty()) grads = torch::autograd::grad({out}, wrt, {grad_out[0]}, false, false, /*allow_unused=*/true);
    torch::autograd::variable_list result;
    result.push_back(x_grad ? grads[0] : torch::Tensor());
    std::vector<torch::Tensor> param_grads(grads.begin() + (x_grad ? 1 : 0), grads.end());
    out = torch::Tensor();  // the recomputed graph, and the weights it saved, go
    if (holder != nullptr) {  // the holder takes the parameters' gradients (autograd gets none)
      param_grads.resize(params.size());
      reinterpret_cast<const Transformer*>(ctx->saved_data["model"].toInt())->reduce_partial_gradients(params, param_grads);
      holder->take_gradients(params, param_grads);
      holder->release(params);
      param_grads.assign(params.size(), torch::Tensor());
    }
    param_grads.resize(params.size());
    result.insert(result.end(), param_grads.begin(), param_grads.end());
    result.resize(result.size() + 7);  // layer, cos, sin, mask, holder, adapters, model: no gradient
    return result;
  }
};

// ZeRO-2's tap at a decoder layer's input: an identity whose backward runs once backward has
// finished the layer. Autograd runs gradient accumulation before any other ready node, so the
// layer's parameters then hold this pass's gradients: the holder takes them and they are released.
// The parameters are not inputs (their accumulation would wait for this node); `anchor`, a leaf
// that needs a gradient, makes the node run when x needs none.
struct LayerGradientTap : public torch::autograd::Function<LayerGradientTap> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& anchor,
                               const std::vector<torch::Tensor>* params, ParameterHolder* holder, const Transformer* model) {
    ctx->saved_data["params"] = c10::List<torch::Tensor>(*params);
    ctx->saved_data["holder"] = reinterpret_cast<int64_t>(holder);
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["x_grad"] = x.requires_grad();
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto list = ctx->saved_data["params"].toTensorList();
    std::vector<torch::Tensor> params(list.begin(), list.end()), grads;
    for (const auto& p : params) grads.push_back(p.grad());
    reinterpret_cast<const Transformer*>(ctx->saved_data["model"].toInt())->reduce_partial_gradients(params, grads);
    reinterpret_cast<ParameterHolder*>(ctx->saved_data["holder"].toInt())->take_gradients(params, grads);
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    return {ctx->saved_data["x_grad"].toBool() ? grad_out[0] : torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

// A trained embedding's lookup whose backward adds its rows straight into the weight's .grad (made
// if absent) and hands autograd no gradient for the weight. LibTorch's embedding backward builds a
// dense zero [V, H] gradient for a handful of rows, and with tied weights autograd then adds it to
// the head's [V, H] gradient out of place before accumulating: three vocabulary-sized buffers a
// micro-batch (0.5B: 545 MB each) that this one index_add_ replaces. The head's gradient still
// reaches .grad through autograd, after this has run (the weight's accumulation waits for both).
// Under tensor parallelism `ids` are rows of this rank's part and `held` [ids] says which tokens
// it holds: the others look up zeros and add nothing (undefined `held`: every token is here).
struct EmbeddingIntoGrad : public torch::autograd::Function<EmbeddingIntoGrad> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& weight,
                               const torch::Tensor& ids, const c10::optional<torch::Tensor>& held) {
    ctx->saved_data["weight"] = weight;  // the parameter itself: its .grad is written
    ctx->save_for_backward({ids, held ? *held : torch::Tensor()});
    auto sizes = ids.sizes().vec();
    sizes.push_back(weight.size(1));
    auto rows = weight.index_select(0, ids.reshape({-1}));
    if (held) rows.mul_(held->reshape({-1, 1}).to(rows.scalar_type()));
    return rows.view(sizes);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto weight = ctx->saved_data["weight"].toTensor();
    const auto saved = ctx->get_saved_variables();
    const auto ids = saved[0].reshape({-1});
    auto g = grads[0].reshape({-1, weight.size(1)}).to(weight.scalar_type());
    torch::NoGradGuard no_grad;
    if (saved[1].defined()) g = g * saved[1].reshape({-1, 1}).to(g.scalar_type());
    if (!weight.grad().defined()) weight.mutable_grad() = torch::zeros_like(weight);
    weight.mutable_grad().index_add_(0, ids, g);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// A linear layer over a frozen weight stored in another dtype than x's: the weight is converted for
// the product and again in backward, so autograd keeps the stored (half-size) weight, not a full-
// precision copy of it per layer. Only x (and a bias that trains) get gradients.
struct StoredWeightLinear : public torch::autograd::Function<StoredWeightLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias) {
    ctx->saved_data["weight"] = weight;
    return torch::nn::functional::linear(x, weight.to(x.scalar_type()),
                                         bias ? as_dtype(*bias, x.scalar_type()) : torch::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto& g = grad_out[0];
    const auto weight = ctx->saved_data["weight"].toTensor().to(g.scalar_type());
    auto grad_x = torch::matmul(g, weight);
    return {grad_x, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace rlcpp
