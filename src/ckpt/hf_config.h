// hf_config.h: Hugging Face's config.json for the model families fsdp.c trains: "llama", "mistral",
// "qwen2" (one architecture: LlamaForCausalLM's, with Qwen2's q/k/v biases) and "gpt2". One struct
// for all four: GPT-2's own keys land in the same fields (n_embd -> hidden_size, n_layer ->
// num_hidden_layers, n_head -> num_attention_heads, n_positions -> max_position_embeddings, n_inner ->
// intermediate_size, layer_norm_epsilon -> norm_eps, activation_function -> hidden_act, attn_pdrop ->
// attention_dropout), so a model reads sizes without a model_type test.
//
// Reading: absent keys take the defaults of transformers' configuration_<family>.py classes
// (tie_word_embeddings false for llama/mistral/qwen2, true for gpt2; rope_theta 10000; rms_norm_eps
// 1e-6; num_key_value_heads = num_attention_heads; head_dim = hidden_size / num_attention_heads; ...);
// the sizes themselves (vocab_size, hidden_size / n_embd, intermediate_size, num_hidden_layers /
// n_layer, num_attention_heads / n_head, n_positions) must be present. A key whose value is null is
// absent. Keys a family does not use are ignored. Every error is one line naming the file and the key:
// an unknown model_type, a rope_scaling type other than null / "default" / "llama3", a hidden_act
// other than "silu" (gpt2: activation_function other than "gelu_new" / "gelu_pytorch_tanh"), a sliding
// window that is on (mistral's sliding_window, qwen2's use_sliding_window) and narrower than
// max_position_embeddings, sizes that are not positive, heads not dividing hidden_size (when head_dim is
// absent), key/value heads not dividing the heads (FSDP_ERR_FORMAT for a malformed file or a value of
// the wrong JSON type, FSDP_ERR_INVALID_ARG for a value out of range).
//
// Writing: the config.json transformers' from_pretrained accepts for the family's *ForCausalLM /
// GPT2LMHeadModel: architectures, model_type and every key above, sorted and indented as
// save_pretrained writes them, through a temporary file renamed into place.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum { HF_LLAMA, HF_MISTRAL, HF_QWEN2, HF_GPT2, HF_N_MODEL_TYPES } hf_model_type;
typedef enum { HF_ROPE_NONE, HF_ROPE_LLAMA3 } hf_rope_type;

#define HF_MAX_EOS 8

typedef struct {
    hf_rope_type type;  // HF_ROPE_NONE for null or {"rope_type": "default"}
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_max_position_embeddings;
} hf_rope_scaling;

typedef struct {
    hf_model_type model_type;
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
    int64_t num_key_value_heads, head_dim, max_position_embeddings;
    double norm_eps;           // rms_norm_eps (gpt2: layer_norm_epsilon)
    double rope_theta;
    hf_rope_scaling rope_scaling;
    int tie_word_embeddings;
    int qkv_bias, o_bias;      // llama: both attention_bias; qwen2: 1 and 0; mistral, gpt2: 0 (gpt2's
                               // Conv1D biases are always there and not described by these)
    int mlp_bias;              // llama's mlp_bias
    double attention_dropout;  // gpt2: attn_pdrop
    char hidden_act[32];       // "silu" (gpt2: activation_function, "gelu_new")
    int64_t bos_token_id;      // -1: none
    int n_eos;                 // 0: none
    int eos_is_list;           // eos_token_id was (and is written as) a list
    int64_t eos_token_id[HF_MAX_EOS];  // (n_eos,)
    char torch_dtype[16];      // "float32", "bfloat16", "float16", "float64", or "" when absent
    int64_t sliding_window;    // mistral, qwen2: 0 when null (off)
    int use_sliding_window;    // qwen2
} hf_config;

// "llama", "mistral", "qwen2", "gpt2".
const char *hf_model_type_name(hf_model_type t);
// The family's architectures[0]: "LlamaForCausalLM", ..., "GPT2LMHeadModel".
const char *hf_architecture_name(hf_model_type t);

// The family's defaults (every size 0: the caller sets them).
void hf_config_defaults(hf_model_type t, hf_config *c);
// Reads and validates path (a config.json file) into *c.
fsdp_status hf_config_read(const char *path, hf_config *c);
// The configuration a file's metadata records (cli/model_config.h: string pairs named as config.json's
// keys, "model_type" among them), read as config.json would be: a value that is JSON text (a number,
// true, false, null) as that, any other as a string; other keys ignored, and fsdp-train's two own
// spellings (hf_config_value_text) read back: qkv_bias true makes a llama model_type qwen2 (its biases),
// rope_scaling "llama3:F,L,H,N" the llama3 object. path names the file in messages. keys, values: (n,)
fsdp_status hf_config_from_pairs(int n, const char *const *keys, const char *const *values, const char *path,
                                hf_config *c);
// Checks c as hf_config_read does (path names it in messages).
fsdp_status hf_config_validate(const hf_config *c, const char *path);
// Writes c as config.json to path ("path.tmp.<pid>" then renamed over it). FSDP_ERR_IO on failure.
fsdp_status hf_config_write(const hf_config *c, const char *path);
// The value c gives key (a config.json key of its family: "n_layer", "hidden_size", ...) as text, into
// buf (cap): integers in decimal, booleans true/false. Two keys in fsdp-train's spelling for the Llama
// family: "qkv_bias" (true: biases on q/k/v without o_proj's, Qwen2's) and "rope_scaling" of type llama3
// as "llama3:FACTOR,LOW,HIGH,ORIGINAL" (--rope-scaling; no value without one). Returns 0 when the family
// has no such key.
int hf_config_value_text(const hf_config *c, const char *key, char *buf, size_t cap);
