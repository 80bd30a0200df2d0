// train_arch.c: the model fsdp-train builds, from its options and input files (train_arch.h): the
// architecture, the recorded configuration, an --init file's shapes, Llama's defaults and checks.
#include "cli/train_arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "cli/train_hf.h"

// The GPT-2 configuration the files record (Hugging Face GPT2Config names), and the flags setting it.
static const cli_config_field gpt2_fields[] = {
    {"n_layer", "--layers"}, {"n_embd", "--d-model"}, {"n_head", "--heads"}, {"vocab_size", "--vocab"},
    {"n_positions", "--max-seq"}};
// The Llama configuration (Hugging Face LlamaConfig names; qkv_bias and rope_scaling in this tool's
// spelling), and the flags setting it.
static const cli_config_field llama_fields[] = {
    {"num_hidden_layers", "--layers"}, {"hidden_size", "--d-model"}, {"num_attention_heads", "--heads"},
    {"num_key_value_heads", "--kv-heads"}, {"head_dim", "--head-dim"}, {"intermediate_size", "--d-ff"},
    {"vocab_size", "--vocab"}, {"max_position_embeddings", "--max-seq"}, {"rope_theta", "--rope-theta"},
    {"rms_norm_eps", "--rms-eps"}, {"tie_word_embeddings", "--tie-embeddings"}, {"attention_bias", "--attention-bias"},
    {"qkv_bias", "--qkv-bias"}, {"mlp_bias", "--mlp-bias"}, {"rope_scaling", "--rope-scaling"}};

// --init of a GPT-2 file: the model's dimensions come from the file (vocab and width from wte, positions
// from wpe, layers from the h.N blocks present); heads from the metadata key "n_head" when present, else
// --heads.
static fsdp_status gpt2_dims_from_file(train_options *o) {
    st_file *f = NULL;
    FSDP_CHECK(st_open(o->training.init_path, &f));
    const char *prefix = st_find(f, "wte.weight") ? "" : "transformer.";
    char name[96];
    snprintf(name, sizeof name, "%swte.weight", prefix);
    const st_entry *wte = st_find(f, name);
    snprintf(name, sizeof name, "%swpe.weight", prefix);
    const st_entry *wpe = st_find(f, name);
    fsdp_status s = FSDP_OK;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2) {
        s = fsdp_error(FSDP_ERR_MISSING, "%s: not a GPT-2 file: needs 2-d wte.weight and wpe.weight", o->training.init_path);
    } else {
        o->vocab = (int)wte->shape[0];
        o->d_model = (int)wte->shape[1];
        o->max_seq = (int)wpe->shape[0];
        int layers = 0;
        for (;; layers++) {
            snprintf(name, sizeof name, "%sh.%d.ln_1.weight", prefix, layers);
            if (!st_find(f, name)) break;
        }
        o->layers = layers;
        const char *heads = st_metadata(f, "n_head");
        char *end = NULL;
        long n_head = heads ? strtol(heads, &end, 10) : o->heads;
        if (heads && (end == heads || *end || n_head < 1 || o->d_model % n_head))
            s = fsdp_error(FSDP_ERR_INVALID_ARG, "%s: metadata n_head '%s': expected a positive integer dividing the "
                           "width %d of wte.weight", o->training.init_path, heads, o->d_model);
        else o->heads = (int)n_head;
        if (layers == 0) s = fsdp_error(FSDP_ERR_MISSING, "%s: no h.0.* blocks", o->training.init_path);
    }
    st_close(f);
    return s;
}

// --init of a Llama file: vocab and width from model.embed_tokens.weight, layers from the
// model.layers.N blocks present, the MLP's width from gate_proj, heads from the metadata key
// "num_attention_heads" when present (else --heads), the head width from q_proj, key/value heads from
// k_proj, the biases and the untied head from the tensors present. Positions (--max-seq) are not in
// the tensors: the metadata's, else the flag's.
static fsdp_status llama_dims_from_file(train_options *o) {
    st_file *f = NULL;
    FSDP_CHECK(st_open(o->training.init_path, &f));
    const char *path = o->training.init_path;
    const st_entry *emb = st_find(f, "model.embed_tokens.weight");
    const st_entry *q = st_find(f, "model.layers.0.self_attn.q_proj.weight");
    const st_entry *k = st_find(f, "model.layers.0.self_attn.k_proj.weight");
    const st_entry *gate = st_find(f, "model.layers.0.mlp.gate_proj.weight");
    fsdp_status s = FSDP_OK;
    const char *heads = st_metadata(f, "num_attention_heads");
    char *end = NULL;
    long n_head = heads ? strtol(heads, &end, 10) : o->heads;
    if (!emb || emb->ndim != 2) {
        s = fsdp_error(FSDP_ERR_MISSING, "%s: not a Llama file: needs a 2-d model.embed_tokens.weight", path);
    } else if (!q || !k || !gate || q->ndim != 2 || k->ndim != 2 || gate->ndim != 2) {
        s = fsdp_error(FSDP_ERR_MISSING, "%s: no model.layers.0 q_proj, k_proj and gate_proj weights (2-d)", path);
    } else if (heads && (end == heads || *end || n_head < 1 || q->shape[0] % n_head)) {
        s = fsdp_error(FSDP_ERR_INVALID_ARG, "%s: metadata num_attention_heads '%s': expected a positive integer "
                       "dividing q_proj's %lld rows", path, heads, (long long)q->shape[0]);
    } else if (q->shape[0] % n_head || k->shape[0] % (q->shape[0] / n_head) ||
               n_head % (k->shape[0] / (q->shape[0] / n_head))) {
        s = fsdp_error(FSDP_ERR_SHAPE, "%s: q_proj [%lld, %lld] and k_proj [%lld, %lld] do not make %ld heads with "
                       "key/value heads dividing them (pass --heads)", path, (long long)q->shape[0],
                       (long long)q->shape[1], (long long)k->shape[0], (long long)k->shape[1], n_head);
    } else {
        o->vocab = (int)emb->shape[0];
        o->d_model = (int)emb->shape[1];
        o->heads = (int)n_head;
        o->head_dim = (int)(q->shape[0] / n_head);
        o->kv_heads = (int)(k->shape[0] / o->head_dim);
        o->d_ff = (int)gate->shape[0];
        o->tie_embeddings = !st_find(f, "lm_head.weight");
        int qkv_bias = st_find(f, "model.layers.0.self_attn.q_proj.bias") != NULL;
        int o_bias = st_find(f, "model.layers.0.self_attn.o_proj.bias") != NULL;
        o->attention_bias = qkv_bias && o_bias;
        o->qkv_bias = qkv_bias && !o_bias;
        o->mlp_bias = st_find(f, "model.layers.0.mlp.gate_proj.bias") != NULL;
        int layers = 0;
        for (char name[96];; layers++) {
            snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", layers);
            if (!st_find(f, name)) break;
        }
        o->layers = layers;
    }
    st_close(f);
    return s;
}

// --init: the model's dimensions from the file, as its architecture lays them out
static fsdp_status dims_from_file(train_options *o) {
    return o->arch == 1 ? llama_dims_from_file(o) : gpt2_dims_from_file(o);
}

// The architecture a run builds: --arch, else the model_type the --init file or the --resume checkpoint
// records (a file without one: Llama when it holds model.embed_tokens.weight), else GPT-2. Returns 0,
// or 2 after a one-line error.
static int choose_arch(const char *prog, train_options *o, const cli_arg *args, int nargs, int argc, char **argv) {
    if (cli_given(args, nargs, argc, argv, "--arch")) return 0;
    char type[64] = "";
    if (cli_config_recorded_model_type(o->training.init_path, &o->fsdp.ckpt, type, sizeof type) != FSDP_OK) {
        fprintf(stderr, "%s: %s\n", prog, fsdp_last_error());
        return 2;
    }
    if (!type[0] && o->training.init_path) {  // a file without metadata: its tensor names tell
        st_file *f = NULL;
        if (st_open(o->training.init_path, &f) == FSDP_OK) {
            if (st_find(f, "model.embed_tokens.weight")) snprintf(type, sizeof type, "llama");
            st_close(f);
        }
    }
    if (!strcmp(type, "llama") || !strcmp(type, "mistral") || !strcmp(type, "qwen2")) o->arch = 1;
    else if (type[0] && strcmp(type, "gpt2")) {
        fprintf(stderr, "%s: %s records model_type %s; this tool builds gpt2 and llama\n", prog,
                o->training.init_path ? o->training.init_path : "the checkpoint", type);
        return 2;
    }
    return 0;
}

// Llama's defaults that depend on other flags (--kv-heads, --head-dim, --d-ff 0), resolved so that the
// files record the sizes built, and its checks. Returns 0, or 2 after a one-line error.
static int resolve_llama_shape(const char *prog, train_options *o) {
    if (!o->kv_heads) o->kv_heads = o->heads;
    if (!o->head_dim) {
        if (o->d_model % o->heads) {
            fprintf(stderr, "%s: --heads %d must divide --d-model %d (or give --head-dim)\n", prog, o->heads,
                    o->d_model);
            return 2;
        }
        o->head_dim = o->d_model / o->heads;
    }
    if (!o->d_ff) o->d_ff = (8 * o->d_model / 3 + 255) / 256 * 256;  // Meta's multiple_of = 256
    if (o->heads % o->kv_heads) {
        fprintf(stderr, "%s: --kv-heads %d must divide --heads %d\n", prog, o->kv_heads, o->heads);
        return 2;
    }
    if (o->head_dim % 2) {
        fprintf(stderr, "%s: --head-dim %d must be even (the rotary embedding rotates pairs)\n", prog, o->head_dim);
        return 2;
    }
    if (o->attention_bias && o->qkv_bias) {
        fprintf(stderr, "%s: --attention-bias already puts biases on q/k/v: drop --qkv-bias\n", prog);
        return 2;
    }
    return 0;
}

// --rope-scaling llama3:FACTOR,LOW,HIGH,ORIGINAL into cfg. Returns 0, or 2 after a one-line error.
static int parse_rope_scaling(const char *prog, const char *text, nn_llama_config *cfg) {
    if (!text) return 0;
    double factor = 0, low = 0, high = 0;
    int orig = 0, used = 0;
    if (sscanf(text, "llama3:%lf,%lf,%lf,%d%n", &factor, &low, &high, &orig, &used) != 4 || text[used] ||
        factor < 1.0 || low <= 0.0 || high <= low || orig < 1) {
        fprintf(stderr, "%s: --rope-scaling '%s': expected llama3:FACTOR,LOW_FREQ_FACTOR,HIGH_FREQ_FACTOR,"
                "ORIGINAL_MAX_POSITIONS with FACTOR >= 1 and 0 < LOW < HIGH (the llama3 type is the one supported)\n", prog,
                text);
        return 2;
    }
    cfg->rope_llama3 = 1;
    cfg->rope_factor = factor, cfg->rope_low_freq_factor = low, cfg->rope_high_freq_factor = high;
    cfg->rope_original_max_seq = orig;
    return 0;
}

int train_arch_resolve(const char *prog, train_options *o, const cli_arg *args, int nargs, int argc, char **argv) {
    if (choose_arch(prog, o, args, nargs, argc, argv)) return 2;
    if (o->arch == 1)
        o->config = (cli_model_config){prog, "llama", llama_fields, (int)(sizeof llama_fields / sizeof *llama_fields),
                                       args, nargs, argc, argv};
    else
        o->config = (cli_model_config){prog, "gpt2", gpt2_fields, (int)(sizeof gpt2_fields / sizeof *gpt2_fields),
                                       args, nargs, argc, argv};
    if (o->arch == 1 && !cli_given(args, nargs, argc, argv, "--lora-targets")) o->lora.targets = "q_proj,v_proj";
    if (cli_config_from_inputs(&o->config, o->training.init_path, &o->fsdp.ckpt)) return 2;
    int prepared = train_hf_prepare(o, dims_from_file);  // --init DIR or FILE, a directory --save's flags
    if (prepared) return prepared;
    if (o->arch == 1 && resolve_llama_shape(prog, o)) return 2;
    nn_llama_config checked;  // --rope-scaling parsed here, so that later builds cannot fail on it
    if (o->arch == 1 && train_arch_llama_config(prog, o, &checked)) return 2;
    static const char *const llama_only[] = {"--kv-heads", "--head-dim", "--rope-theta", "--rope-scaling", "--rms-eps",
                                             "--tie-embeddings", "--attention-bias", "--qkv-bias", "--mlp-bias"};
    for (size_t i = 0; o->arch == 0 && i < sizeof llama_only / sizeof *llama_only; i++)
        if (cli_given(args, nargs, argc, argv, llama_only[i])) {  // a flag GPT-2 has no use for: not ignored
            fprintf(stderr, "%s: %s applies to the Llama family (--arch llama); this run builds GPT-2\n", prog,
                    llama_only[i]);
            return 2;
        }
    if (o->arch == 0 && o->d_ff && o->d_ff != 4 * o->d_model) {
        fprintf(stderr, "%s: --d-ff %d: GPT-2's MLP is 4 x d_model = %d wide\n", prog, o->d_ff, 4 * o->d_model);
        return 2;
    }
    if (o->arch == 0 && o->d_model % o->heads) {
        fprintf(stderr, "%s: --heads %d must divide --d-model %d\n", prog, o->heads, o->d_model);
        return 2;
    }
    if (o->max_seq == 0) o->max_seq = o->seq;
    if (o->max_seq < o->seq) {
        fprintf(stderr, "%s: --max-seq %d is smaller than --seq %d\n", prog, o->max_seq, o->seq);
        return 2;
    }
    return 0;
}

int train_arch_llama_config(const char *prog, const train_options *o, nn_llama_config *cfg) {
    *cfg = (nn_llama_config){o->vocab, o->max_seq, o->layers, o->d_model, o->heads, o->kv_heads, o->head_dim,
                             o->d_ff, o->rms_eps, (double)o->rope_theta, 0, 0, 0, 0, 0, o->tie_embeddings,
                             o->attention_bias || o->qkv_bias, o->attention_bias, o->mlp_bias, o->dropout, 0.02f};
    return parse_rope_scaling(prog, o->rope_scaling, cfg);
}
