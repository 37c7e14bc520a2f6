# Sourced by the bench scripts: a random-weight Qwen2.5-shaped model with the real Qwen tokenizer.
#   qwen_shape_model RLCPP OUT_DIR TOKENIZER_DIR HIDDEN INTERMEDIATE LAYERS HEADS KV_HEADS
# writes OUT_DIR (rlcpp init, seed 0, normal(0, 0.02)); Qwen2.5-0.5B is 896 4864 24 14 2.
qwen_shape_model() {
  local rlcpp=$1 out=$2 tokenizer=$3 config
  config=$(mktemp --suffix .json)
  cat > "$config" <<JSON
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": $4,
 "intermediate_size": $5, "num_hidden_layers": $6, "num_attention_heads": $7, "num_key_value_heads": $8,
 "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "eos_token_id": 151645, "bos_token_id": 151643, "torch_dtype": "float32"}
JSON
  "$rlcpp" init --config "$config" --tokenizer "$tokenizer" --out "$out" --seed 0 --std 0.02
  local rc=$?
  rm -f "$config"
  return $rc
}
