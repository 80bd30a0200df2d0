// train_hf.c: fsdp-train's --init DIR and --save DIR (train_hf.h).
#include "cli/train_hf.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ckpt/hf_config.h"
#include "ckpt/hf_dir.h"
#include "ckpt/st_source.h"
#include "cli/train_ckpt.h"

int train_hf_save_is_dir(const char *path) {
    size_t n = strlen(path), k = strlen(".safetensors");
    return !(n >= k && strcmp(path + n - k, ".safetensors") == 0);
}

cli_output_kind train_hf_save_kind(const char *path) {
    return path && train_hf_save_is_dir(path) ? CLI_OUT_HF_DIR : CLI_OUT_FILE;
}

int train_hf_parse_size(const char *text, uint64_t *bytes) {
    static const struct { const char *suffix; uint64_t scale; } units[] = {
        {"", 1}, {"kb", 1000}, {"mb", 1000000}, {"gb", 1000000000}, {"kib", 1ull << 10}, {"mib", 1ull << 20},
        {"gib", 1ull << 30}};
    if (!isdigit((unsigned char)text[0])) return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || v == 0) return -1;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcasecmp(end, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].scale) return -1;
            *bytes = v * units[i].scale;
            return 0;
        }
    return -1;
}

// config.json of an --init directory into *c (a one-line error on failure).
static fsdp_status read_dir_config(const char *dir, hf_config *c) {
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/%s", dir, HF_CONFIG_NAME);
    return hf_config_read(path, c);
}

// What the architecture o builds cannot build from config.json: another family; for GPT-2 (nn/gpt2.h) an
// MLP other than 4 x n_embd or an untied head. (The Llama family builds what hf_config_read accepts.)
static fsdp_status check_config(const train_options *o, const hf_config *c, const char *dir) {
    if ((c->model_type == HF_GPT2) != (o->arch == 0))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s/%s: model_type %s: this run builds %s", dir, HF_CONFIG_NAME,
                          hf_model_type_name(c->model_type), o->arch ? "the Llama family (--arch llama)" : "gpt2");
    if (o->arch) return FSDP_OK;
    if (c->intermediate_size != 4 * c->hidden_size)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s/%s: key 'n_inner' is %" PRId64 ": fsdp-train's GPT-2 has an MLP of "
                          "4 x n_embd = %" PRId64, dir, HF_CONFIG_NAME, c->intermediate_size, 4 * c->hidden_size);
    if (!c->tie_word_embeddings)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s/%s: key 'tie_word_embeddings' is false: fsdp-train's GPT-2 ties "
                          "lm_head to wte", dir, HF_CONFIG_NAME);
    return FSDP_OK;
}

// The double of the shortest decimal that reads back as the float x (a flag's 1e-5f is written 1e-05, as
// the config.json it came from had it, not 9.99999974e-06)
static double shortest_decimal(float x) {
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return strtod(buf, NULL);
}

// The Llama-family part of save_config: the sizes and settings o trains with (model_type: the --init
// directory's llama, mistral or qwen2, else llama; qwen2 where the biases are Qwen2's).
static fsdp_status llama_save_config(const train_options *o, hf_config *c) {
    c->vocab_size = o->vocab, c->hidden_size = o->d_model, c->num_hidden_layers = o->layers;
    c->num_attention_heads = o->heads, c->num_key_value_heads = o->kv_heads, c->head_dim = o->head_dim;
    c->max_position_embeddings = o->max_seq, c->intermediate_size = o->d_ff;
    c->tie_word_embeddings = o->tie_embeddings, c->norm_eps = shortest_decimal(o->rms_eps);
    c->rope_theta = shortest_decimal(o->rope_theta);
    c->qkv_bias = o->attention_bias || o->qkv_bias, c->o_bias = o->attention_bias, c->mlp_bias = o->mlp_bias;
    if (c->qkv_bias != c->o_bias && c->model_type == HF_LLAMA) c->model_type = HF_QWEN2;  // Llama's key ties them
    if (c->model_type != HF_QWEN2 && c->qkv_bias && !c->o_bias)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "--save %s: q/k/v biases without o_proj's are Qwen2's, not %s's",
                          o->training.save_path, hf_model_type_name(c->model_type));
    if (c->model_type != HF_LLAMA && (c->mlp_bias || (c->qkv_bias && c->o_bias)))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "--save %s: %s has no attention_bias / mlp_bias keys", o->training.save_path,
                          hf_model_type_name(c->model_type));
    c->attention_dropout = shortest_decimal(o->dropout);
    c->rope_scaling.type = HF_ROPE_NONE;
    if (o->rope_scaling) {  // validated by the model's build: "llama3:FACTOR,LOW,HIGH,ORIGINAL"
        c->rope_scaling.type = HF_ROPE_LLAMA3;
        if (sscanf(o->rope_scaling, "llama3:%lf,%lf,%lf,%" SCNd64, &c->rope_scaling.factor,
                   &c->rope_scaling.low_freq_factor, &c->rope_scaling.high_freq_factor,
                   &c->rope_scaling.original_max_position_embeddings) != 4)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "--rope-scaling '%s' is not llama3:F,L,H,N", o->rope_scaling);
    }
    snprintf(c->hidden_act, sizeof c->hidden_act, "silu");
    return hf_config_validate(c, o->training.save_path);
}

// The config.json of the model o trains: an --init directory's (its other keys kept), the sizes o's.
static fsdp_status save_config(const train_options *o, hf_config *c) {
    struct stat sb;
    const char *init = o->training.init_path;
    if (init && stat(init, &sb) == 0 && S_ISDIR(sb.st_mode)) FSDP_CHECK(read_dir_config(init, c));
    else hf_config_defaults(o->arch ? HF_LLAMA : HF_GPT2, c);
    if (o->arch) return llama_save_config(o, c);
    c->vocab_size = o->vocab, c->hidden_size = o->d_model, c->num_hidden_layers = o->layers;
    c->num_attention_heads = c->num_key_value_heads = o->heads, c->head_dim = o->d_model / o->heads;
    c->max_position_embeddings = o->max_seq, c->intermediate_size = 4 * (int64_t)o->d_model;
    c->tie_word_embeddings = 1, c->norm_eps = 1e-5, c->attention_dropout = o->dropout;
    snprintf(c->hidden_act, sizeof c->hidden_act, "gelu_new");
    return hf_config_validate(c, o->training.save_path);
}

// Prints one line for a flag error and returns 2.
static int flag_error(const char *line) {
    fprintf(stderr, "fsdp-train: %s\n", line);
    return 2;
}

int train_hf_prepare(train_options *o, fsdp_status (*dims_from_file)(train_options *)) {
    const cli_model_config *c = &o->config;
    const char *save = o->training.save_path;
    char line[600];
    int given_dtype = cli_given(c->args, c->nargs, c->argc, c->argv, "--save-dtype");
    int given_size = cli_given(c->args, c->nargs, c->argc, c->argv, "--save-shard-size");
    const char *flag = given_dtype ? "--save-dtype" : "--save-shard-size";
    if ((given_dtype || given_size) && (!save || !train_hf_save_is_dir(save))) {
        snprintf(line, sizeof line, "%s applies to a Hugging Face directory --save (a path not ending in "
                 ".safetensors)%s%.400s%s", flag, save ? "; --save " : ", and no --save is given", save ? save : "",
                 save ? " is one fp32 file" : "");
        return flag_error(line);
    }
    if (save && train_hf_save_is_dir(save) && o->lora.rank > 0) {  // (train_lora_save writes one file)
        snprintf(line, sizeof line, "--save %.400s with --lora-rank: the adapters (or, with --lora-merge-on-save, the "
                 "merged weights) are written as one file: give a path ending in .safetensors", save);
        return flag_error(line);
    }
    if (train_hf_parse_size(o->save_shard_size, &o->save_shard_bytes) != 0) {
        snprintf(line, sizeof line, "--save-shard-size '%.200s': expected a positive number of bytes, optionally with "
                 "KB, MB, GB (powers of 1000) or KiB, MiB, GiB", o->save_shard_size);
        return flag_error(line);
    }
    const char *init = o->training.init_path;
    struct stat sb;
    if (!init) return 0;
    if (stat(init, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        if (dims_from_file(o) == FSDP_OK) return 0;
        fprintf(stderr, "fsdp-train: %s\n", fsdp_last_error());
        return 1;
    }
    hf_config hf;
    st_source *src = NULL;
    if (read_dir_config(init, &hf) != FSDP_OK || check_config(o, &hf, init) != FSDP_OK ||
        st_source_open(init, &src) != FSDP_OK)
        return flag_error(fsdp_last_error());
    st_source_close(src);  // (opened again by each rank's fsdp_load_params)
    return 0;
}

// Rank 0: one line saying what the directory holds (read back).
static fsdp_status report_dir(const char *prog, const char *dir, const char *dtype) {
    st_source *src = NULL;
    FSDP_CHECK(st_source_open(dir, &src));
    int64_t numel = 0;
    for (int i = 0; i < st_source_count(src); i++) {
        const st_entry *e = st_source_entry_at(src, i, NULL);
        int64_t n = 1;
        for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
        numel += n;
    }
    printf("%s: saved %d tensors (%.2fM parameters, %s) in %d file(s) + config.json to %s\n", prog,
           st_source_count(src), (double)numel / 1e6, dtype, st_source_file_count(src), dir);
    fflush(stdout);
    st_source_close(src);
    return FSDP_OK;
}

fsdp_status train_hf_save_weights(const char *prog, const train_options *o, fsdp_state *fs, int rank) {
    const char *path = o->training.save_path;
    if (!train_hf_save_is_dir(path)) return cli_save_weights(prog, fs, path, rank);
    hf_config cfg;
    FSDP_CHECK(save_config(o, &cfg));
    fsdp_dtype dtype = o->save_dtype == 1 ? FSDP_BF16 : FSDP_F32;
    FSDP_CHECK(fsdp_save_hf(fs, path, &cfg, FSDP_PARAMS_ALL, dtype, o->save_shard_bytes));
    return rank == 0 ? report_dir(prog, path, dtype == FSDP_BF16 ? "bf16" : "fp32") : FSDP_OK;
}
