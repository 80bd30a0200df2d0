// hf_config.c: config.json read and written through one table of keys per family (hf_config.h); the
// keys that are not plain scalars (model_type, architectures, num_key_value_heads, head_dim, n_inner,
// rope_scaling, bos/eos_token_id, sliding_window) are handled beside it.
#include "ckpt/hf_config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json_value.h"

#define LLAMA_FAMILY (1u << HF_LLAMA | 1u << HF_MISTRAL | 1u << HF_QWEN2)
#define GPT2_ONLY (1u << HF_GPT2)

static const char *const type_names[HF_N_MODEL_TYPES] = {"llama", "mistral", "qwen2", "gpt2"};
static const char *const arch_names[HF_N_MODEL_TYPES] = {"LlamaForCausalLM", "MistralForCausalLM",
                                                         "Qwen2ForCausalLM", "GPT2LMHeadModel"};

const char *hf_model_type_name(hf_model_type t) { return (unsigned)t < HF_N_MODEL_TYPES ? type_names[t] : "?"; }
const char *hf_architecture_name(hf_model_type t) { return (unsigned)t < HF_N_MODEL_TYPES ? arch_names[t] : "?"; }

typedef enum { K_INT, K_FLOAT, K_BOOL, K_STRING } key_kind;

// One plain key: where it goes, for which families, whether it must be there, and its default.
typedef struct {
    const char *key;
    key_kind kind;
    size_t offset;        // of an int64_t (K_INT), double (K_FLOAT), int (K_BOOL) or char[] (K_STRING)
    size_t size;          // K_STRING: the field's size
    unsigned families;    // bit t for each hf_model_type t that has the key
    int required;
    double def;           // K_INT, K_FLOAT, K_BOOL default
    const char *sdef;     // K_STRING default
} key_spec;

#define F(field) offsetof(hf_config, field), sizeof(((hf_config *)0)->field)
static const key_spec plain_keys[] = {
    {"vocab_size", K_INT, F(vocab_size), LLAMA_FAMILY | GPT2_ONLY, 1, 0, NULL},
    {"hidden_size", K_INT, F(hidden_size), LLAMA_FAMILY, 1, 0, NULL},
    {"n_embd", K_INT, F(hidden_size), GPT2_ONLY, 1, 0, NULL},
    {"intermediate_size", K_INT, F(intermediate_size), LLAMA_FAMILY, 1, 0, NULL},
    {"num_hidden_layers", K_INT, F(num_hidden_layers), LLAMA_FAMILY, 1, 0, NULL},
    {"n_layer", K_INT, F(num_hidden_layers), GPT2_ONLY, 1, 0, NULL},
    {"num_attention_heads", K_INT, F(num_attention_heads), LLAMA_FAMILY, 1, 0, NULL},
    {"n_head", K_INT, F(num_attention_heads), GPT2_ONLY, 1, 0, NULL},
    {"max_position_embeddings", K_INT, F(max_position_embeddings), 1u << HF_LLAMA, 0, 2048, NULL},
    {"max_position_embeddings", K_INT, F(max_position_embeddings), 1u << HF_MISTRAL, 0, 4096 * 32, NULL},
    {"max_position_embeddings", K_INT, F(max_position_embeddings), 1u << HF_QWEN2, 0, 32768, NULL},
    {"n_positions", K_INT, F(max_position_embeddings), GPT2_ONLY, 1, 0, NULL},
    {"rms_norm_eps", K_FLOAT, F(norm_eps), LLAMA_FAMILY, 0, 1e-6, NULL},
    {"layer_norm_epsilon", K_FLOAT, F(norm_eps), GPT2_ONLY, 0, 1e-5, NULL},
    {"rope_theta", K_FLOAT, F(rope_theta), LLAMA_FAMILY, 0, 10000.0, NULL},
    {"tie_word_embeddings", K_BOOL, F(tie_word_embeddings), LLAMA_FAMILY, 0, 0, NULL},
    {"tie_word_embeddings", K_BOOL, F(tie_word_embeddings), GPT2_ONLY, 0, 1, NULL},
    {"attention_bias", K_BOOL, F(qkv_bias), 1u << HF_LLAMA, 0, 0, NULL},
    {"mlp_bias", K_BOOL, F(mlp_bias), 1u << HF_LLAMA, 0, 0, NULL},
    {"attention_dropout", K_FLOAT, F(attention_dropout), LLAMA_FAMILY, 0, 0.0, NULL},
    {"attn_pdrop", K_FLOAT, F(attention_dropout), GPT2_ONLY, 0, 0.1, NULL},
    {"hidden_act", K_STRING, F(hidden_act), LLAMA_FAMILY, 0, 0, "silu"},
    {"activation_function", K_STRING, F(hidden_act), GPT2_ONLY, 0, 0, "gelu_new"},
    {"torch_dtype", K_STRING, F(torch_dtype), LLAMA_FAMILY | GPT2_ONLY, 0, 0, ""},
    {"use_sliding_window", K_BOOL, F(use_sliding_window), 1u << HF_QWEN2, 0, 0, NULL},
};
#undef F
#define N_PLAIN_KEYS (int)(sizeof plain_keys / sizeof *plain_keys)

static void *field(hf_config *c, const key_spec *k) { return (char *)c + k->offset; }
static const void *cfield(const hf_config *c, const key_spec *k) { return (const char *)c + k->offset; }

void hf_config_defaults(hf_model_type t, hf_config *c) {
    memset(c, 0, sizeof *c);
    c->model_type = t;
    for (int i = 0; i < N_PLAIN_KEYS; i++) {
        const key_spec *k = &plain_keys[i];
        if (!(k->families & 1u << t)) continue;
        if (k->kind == K_INT) *(int64_t *)field(c, k) = (int64_t)k->def;
        else if (k->kind == K_FLOAT) *(double *)field(c, k) = k->def;
        else if (k->kind == K_BOOL) *(int *)field(c, k) = (int)k->def;
        else snprintf(field(c, k), k->size, "%s", k->sdef);
    }
    c->qkv_bias = t == HF_QWEN2;  // qwen2: q/k/v biases, o_proj without
    c->o_bias = 0;
    c->bos_token_id = -1;
    c->sliding_window = t == HF_MISTRAL || t == HF_QWEN2 ? 4096 : 0;  // the classes' defaults
}

// ---------------------------------------------------------------- reading

// An integer value (JSON number without fraction) into *out, or a one-line error naming path and key.
static fsdp_status take_int(const json_value *v, const char *path, const char *key, int64_t *out) {
    if (v->type != JSON_NUMBER || !v->is_integer)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: key '%s' must be an integer, not %s", path, key,
                          v->type == JSON_NUMBER ? "a fraction" : json_type_name(v->type));
    *out = v->integer;
    return FSDP_OK;
}

// A number into *out, or a one-line error.
static fsdp_status take_number(const json_value *v, const char *path, const char *key, double *out) {
    if (v->type != JSON_NUMBER)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: key '%s' must be a number, not %s", path, key, json_type_name(v->type));
    *out = v->number;
    return FSDP_OK;
}

// One plain key of the table into c (the default stays when the key is absent or null).
static fsdp_status take_plain(const json_value *root, const char *path, const key_spec *k, hf_config *c) {
    const json_value *v = json_get(root, k->key);
    if (!v || v->type == JSON_NULL) {
        if (k->required) return fsdp_error(FSDP_ERR_FORMAT, "%s: missing key '%s'", path, k->key);
        return FSDP_OK;
    }
    switch (k->kind) {
    case K_INT: return take_int(v, path, k->key, field(c, k));
    case K_FLOAT: return take_number(v, path, k->key, field(c, k));
    case K_BOOL:
        if (v->type != JSON_BOOL)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: key '%s' must be true or false, not %s", path, k->key,
                              json_type_name(v->type));
        *(int *)field(c, k) = v->boolean;
        return FSDP_OK;
    case K_STRING:
        if (v->type != JSON_STRING || strlen(v->string) >= k->size)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: key '%s' must be a string of under %zu bytes", path, k->key,
                              k->size);
        snprintf(field(c, k), k->size, "%s", v->string);
        return FSDP_OK;
    }
    return FSDP_OK;
}

// rope_scaling: null, {"rope_type" (or "type"): "default"}, or llama3's five keys.
static fsdp_status take_rope_scaling(const json_value *root, const char *path, hf_config *c) {
    const json_value *v = json_get(root, "rope_scaling");
    if (!v || v->type == JSON_NULL) return FSDP_OK;
    if (v->type != JSON_OBJECT)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: key 'rope_scaling' must be null or an object, not %s", path,
                          json_type_name(v->type));
    const json_value *t = json_get(v, "rope_type");
    if (!t) t = json_get(v, "type");
    if (!t || t->type != JSON_STRING)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: key 'rope_scaling' needs a string 'rope_type' (or 'type')", path);
    if (!strcmp(t->string, "default")) return FSDP_OK;
    if (strcmp(t->string, "llama3") != 0)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: rope_scaling type '%.40s' is not supported (null, \"default\" "
                          "or \"llama3\")", path, t->string);
    hf_rope_scaling *r = &c->rope_scaling;
    r->type = HF_ROPE_LLAMA3;
    static const char *const names[3] = {"factor", "low_freq_factor", "high_freq_factor"};
    double *dst[3] = {&r->factor, &r->low_freq_factor, &r->high_freq_factor};
    char key[64];
    for (int i = 0; i < 3; i++) {
        const json_value *x = json_get(v, names[i]);
        snprintf(key, sizeof key, "rope_scaling.%s", names[i]);
        if (!x) return fsdp_error(FSDP_ERR_FORMAT, "%s: missing key '%s' (rope_type llama3)", path, key);
        FSDP_CHECK(take_number(x, path, key, dst[i]));
    }
    const json_value *x = json_get(v, "original_max_position_embeddings");
    if (!x)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: missing key 'rope_scaling.original_max_position_embeddings' "
                          "(rope_type llama3)", path);
    return take_int(x, path, "rope_scaling.original_max_position_embeddings", &r->original_max_position_embeddings);
}

// bos_token_id (an integer) and eos_token_id (an integer or a list of them); null or absent: none.
static fsdp_status take_token_ids(const json_value *root, const char *path, hf_config *c) {
    const json_value *b = json_get(root, "bos_token_id"), *e = json_get(root, "eos_token_id");
    if (b && b->type != JSON_NULL) FSDP_CHECK(take_int(b, path, "bos_token_id", &c->bos_token_id));
    if (!e || e->type == JSON_NULL) return FSDP_OK;
    if (e->type != JSON_ARRAY) {
        c->n_eos = 1;
        return take_int(e, path, "eos_token_id", &c->eos_token_id[0]);
    }
    if (e->count > HF_MAX_EOS)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: key 'eos_token_id' lists %d ids, at most %d are supported", path,
                          e->count, HF_MAX_EOS);
    c->eos_is_list = 1;
    for (c->n_eos = 0; c->n_eos < e->count; c->n_eos++)
        FSDP_CHECK(take_int(&e->items[c->n_eos], path, "eos_token_id", &c->eos_token_id[c->n_eos]));
    return FSDP_OK;
}

// The keys beside the table: the family's head counts, head_dim, n_inner, biases and sliding window.
static fsdp_status take_special(const json_value *root, const char *path, hf_config *c, int *head_dim_given) {
    const json_value *v;
    c->num_key_value_heads = c->num_attention_heads;
    if (c->model_type == HF_GPT2) {
        c->intermediate_size = 4 * c->hidden_size;
        if ((v = json_get(root, "n_inner")) && v->type != JSON_NULL)
            FSDP_CHECK(take_int(v, path, "n_inner", &c->intermediate_size));
        c->qkv_bias = c->o_bias = 0;
        c->head_dim = c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
        *head_dim_given = 0;
        return take_token_ids(root, path, c);
    }
    if ((v = json_get(root, "num_key_value_heads")) && v->type != JSON_NULL)
        FSDP_CHECK(take_int(v, path, "num_key_value_heads", &c->num_key_value_heads));
    *head_dim_given = (v = json_get(root, "head_dim")) && v->type != JSON_NULL;
    if (*head_dim_given) FSDP_CHECK(take_int(v, path, "head_dim", &c->head_dim));
    else c->head_dim = c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
    if (c->model_type == HF_LLAMA) c->o_bias = c->qkv_bias;  // attention_bias: all four projections
    if ((v = json_get(root, "sliding_window")) && v->type == JSON_NULL) c->sliding_window = 0;
    else if (v) FSDP_CHECK(take_int(v, path, "sliding_window", &c->sliding_window));
    if (c->model_type == HF_LLAMA) c->sliding_window = 0;
    FSDP_CHECK(take_rope_scaling(root, path, c));
    return take_token_ids(root, path, c);
}

// The checks of hf_config_validate that need to know whether head_dim was given.
static fsdp_status validate_impl(const hf_config *c, const char *path, int head_dim_given) {
    int gpt2 = c->model_type == HF_GPT2;
    const struct { const char *key; int64_t v; } sizes[] = {
        {"vocab_size", c->vocab_size}, {gpt2 ? "n_embd" : "hidden_size", c->hidden_size},
        {gpt2 ? "n_inner" : "intermediate_size", c->intermediate_size},
        {gpt2 ? "n_layer" : "num_hidden_layers", c->num_hidden_layers},
        {gpt2 ? "n_head" : "num_attention_heads", c->num_attention_heads},
        {"num_key_value_heads", c->num_key_value_heads}, {"head_dim", c->head_dim},
        {gpt2 ? "n_positions" : "max_position_embeddings", c->max_position_embeddings}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].v < 1 || sizes[i].v > INT32_MAX)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key '%s' is %" PRId64 ": expected a positive size", path,
                              sizes[i].key, sizes[i].v);
    if (!head_dim_given && c->hidden_size % c->num_attention_heads)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key '%s' %" PRId64 " does not divide %s %" PRId64 " (and no "
                          "head_dim is given)", path, gpt2 ? "n_head" : "num_attention_heads", c->num_attention_heads,
                          gpt2 ? "n_embd" : "hidden_size", c->hidden_size);
    if (c->num_attention_heads % c->num_key_value_heads)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key 'num_key_value_heads' %" PRId64 " does not divide "
                          "num_attention_heads %" PRId64, path, c->num_key_value_heads, c->num_attention_heads);
    if (!(c->norm_eps > 0.0 && c->norm_eps < 1.0))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key '%s' is %g: expected a small positive number", path,
                          gpt2 ? "layer_norm_epsilon" : "rms_norm_eps", c->norm_eps);
    if (!gpt2 && !(c->rope_theta > 0.0 && isfinite(c->rope_theta)))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key 'rope_theta' is %g: expected a positive number", path,
                          c->rope_theta);
    if (!(c->attention_dropout >= 0.0 && c->attention_dropout < 1.0))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key '%s' is %g: expected a probability in [0, 1)", path,
                          gpt2 ? "attn_pdrop" : "attention_dropout", c->attention_dropout);
    if (gpt2 && strcmp(c->hidden_act, "gelu_new") && strcmp(c->hidden_act, "gelu_pytorch_tanh"))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key 'activation_function' is '%s': only \"gelu_new\" (GPT-2's "
                          "tanh GELU) is supported", path, c->hidden_act);
    if (!gpt2 && strcmp(c->hidden_act, "silu"))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key 'hidden_act' is '%s': the %s family computes \"silu\"", path,
                          c->hidden_act, hf_model_type_name(c->model_type));
    int sliding = c->sliding_window > 0 && (c->model_type == HF_MISTRAL || c->use_sliding_window);
    if (sliding && c->sliding_window < c->max_position_embeddings)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key 'sliding_window' is %" PRId64 " (below max_position_embeddings "
                          "%" PRId64 "): sliding-window attention is not supported (null%s turns it off)", path,
                          c->sliding_window, c->max_position_embeddings,
                          c->model_type == HF_QWEN2 ? ", or use_sliding_window false," : "");
    static const char *const dtypes[] = {"", "float32", "bfloat16", "float16", "float64"};
    size_t d = 0;
    while (d < sizeof dtypes / sizeof *dtypes && strcmp(c->torch_dtype, dtypes[d])) d++;
    if (d == sizeof dtypes / sizeof *dtypes)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key 'torch_dtype' is '%s': expected float32, bfloat16, float16 or "
                          "float64", path, c->torch_dtype);
    const hf_rope_scaling *r = &c->rope_scaling;
    if (r->type == HF_ROPE_LLAMA3 &&
        !(r->factor > 0.0 && r->low_freq_factor > 0.0 && r->high_freq_factor > r->low_freq_factor &&
          r->original_max_position_embeddings > 0))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: key 'rope_scaling': llama3 needs factor > 0, 0 < low_freq_factor "
                          "< high_freq_factor and original_max_position_embeddings > 0", path);
    return FSDP_OK;
}

fsdp_status hf_config_validate(const hf_config *c, const char *path) {
    return validate_impl(c, path, c->model_type != HF_GPT2);  // a set head_dim: heads x head_dim may differ from hidden
}

// The whole parsed document into c.
static fsdp_status from_json(const json_value *root, const char *path, hf_config *c) {
    if (root->type != JSON_OBJECT)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: expected a JSON object, not %s", path, json_type_name(root->type));
    const json_value *mt = json_get(root, "model_type");
    if (!mt) return fsdp_error(FSDP_ERR_FORMAT, "%s: missing key 'model_type'", path);
    if (mt->type != JSON_STRING)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: key 'model_type' must be a string", path);
    int t = 0;
    while (t < HF_N_MODEL_TYPES && strcmp(mt->string, type_names[t])) t++;
    if (t == HF_N_MODEL_TYPES)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: model_type '%.40s' is not supported (llama, mistral, qwen2 or "
                          "gpt2)", path, mt->string);
    hf_config_defaults((hf_model_type)t, c);
    for (int i = 0; i < N_PLAIN_KEYS; i++)
        if (plain_keys[i].families & 1u << t) FSDP_CHECK(take_plain(root, path, &plain_keys[i], c));
    const json_value *dt = json_get(root, "dtype");  // transformers 4.56+ writes "dtype"
    if (!json_get(root, "torch_dtype") && dt && dt->type == JSON_STRING && strlen(dt->string) < sizeof c->torch_dtype)
        snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", dt->string);
    int head_dim_given = 0;
    FSDP_CHECK(take_special(root, path, c, &head_dim_given));
    return validate_impl(c, path, head_dim_given);
}

fsdp_status hf_config_from_pairs(int n, const char *const *keys, const char *const *values, const char *path,
                                hf_config *c) {
    json_value root = {.type = JSON_OBJECT};
    root.items = calloc((size_t)(n ? n : 1), sizeof *root.items);
    root.keys = calloc((size_t)(n ? n : 1), sizeof *root.keys);
    fsdp_status s = root.items && root.keys ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    // fsdp-train's spellings (hf_config_value_text): qkv_bias true is Qwen2's layout; rope_scaling
    // "llama3:F,L,H,N" is the object config.json holds
    int qwen2 = 0;
    for (int i = 0; i < n; i++) qwen2 |= !strcmp(keys[i], "qkv_bias") && !strcmp(values[i], "true");
    for (int i = 0; s == FSDP_OK && i < n; i++) {
        json_value *v = &root.items[root.count];
        if (json_get(&root, keys[i])) continue;  // (a file's metadata has unique keys)
        root.keys[root.count] = strdup(keys[i]);
        char text[320];
        const char *value = values[i];
        double f = 0, lo = 0, hi = 0;
        long long orig = 0;
        if (qwen2 && !strcmp(keys[i], "model_type") && !strcmp(value, "llama")) value = "qwen2";
        if (!strcmp(keys[i], "rope_scaling") && sscanf(value, "llama3:%lf,%lf,%lf,%lld", &f, &lo, &hi, &orig) == 4) {
            snprintf(text, sizeof text, "{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": %.17g, "
                     "\"high_freq_factor\": %.17g, \"original_max_position_embeddings\": %lld}", f, lo, hi, orig);
            value = text;
        }
        if (json_parse(value, strlen(value), path, "value", v) != FSDP_OK) {  // not JSON: a string
            v->type = JSON_STRING;
            v->string = strdup(value);
        }
        if (!root.keys[root.count++] || (v->type == JSON_STRING && !v->string))
            s = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    }
    if (s == FSDP_OK) s = from_json(&root, path, c);
    json_value_free(&root);
    return s;
}

fsdp_status hf_config_read(const char *path, hf_config *c) {
    json_value root;
    FSDP_CHECK(json_parse_file(path, "JSON", &root));
    fsdp_status s = from_json(&root, path, c);
    json_value_free(&root);
    return s;
}

// ---------------------------------------------------------------- writing

// One "key": value line of the output, the value already JSON text.
typedef struct {
    const char *key;
    char value[320];
} out_pair;

static int cmp_pair(const void *a, const void *b) { return strcmp(((const out_pair *)a)->key, ((const out_pair *)b)->key); }

// The shortest %g text that reads back as x (as Python's repr writes floats), with ".0" on an integer.
static void put_double(char *buf, size_t cap, double x) {
    if (x == (double)(int64_t)x && fabs(x) < 1e16) {  // an integer: 10000.0, as repr writes it, not 1e+04
        snprintf(buf, cap, "%.1f", x);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".eEn")) snprintf(buf + strlen(buf), cap - strlen(buf), ".0");
}

// The text of plain key k's value in c. buf: (cap,)
static void plain_text(const hf_config *c, const key_spec *k, char *buf, size_t cap, int quote) {
    const void *f = cfield(c, k);
    if (k->kind == K_INT) snprintf(buf, cap, "%" PRId64, *(const int64_t *)f);
    else if (k->kind == K_FLOAT) put_double(buf, cap, *(const double *)f);
    else if (k->kind == K_BOOL) snprintf(buf, cap, "%s", *(const int *)f ? "true" : "false");
    else snprintf(buf, cap, quote ? "\"%s\"" : "%s", (const char *)f);  // the strings need no escapes (validated)
}

int hf_config_value_text(const hf_config *c, const char *key, char *buf, size_t cap) {
    for (int i = 0; i < N_PLAIN_KEYS; i++)
        if (plain_keys[i].families & 1u << c->model_type && !strcmp(plain_keys[i].key, key)) {
            plain_text(c, &plain_keys[i], buf, cap, 0);
            return 1;
        }
    int gpt2 = c->model_type == HF_GPT2;
    const char *k = key;
    if (!strcmp(k, "model_type")) snprintf(buf, cap, "%s", hf_model_type_name(c->model_type));
    else if (gpt2 && !strcmp(k, "n_inner")) snprintf(buf, cap, "%" PRId64, c->intermediate_size);
    else if (!gpt2 && !strcmp(k, "num_key_value_heads")) snprintf(buf, cap, "%" PRId64, c->num_key_value_heads);
    else if (!gpt2 && !strcmp(k, "head_dim")) snprintf(buf, cap, "%" PRId64, c->head_dim);
    else if (!gpt2 && !strcmp(k, "qkv_bias")) snprintf(buf, cap, "%s", c->qkv_bias && !c->o_bias ? "true" : "false");
    else if (!gpt2 && !strcmp(k, "rope_scaling") && c->rope_scaling.type == HF_ROPE_LLAMA3)
        snprintf(buf, cap, "llama3:%.17g,%.17g,%.17g,%" PRId64, c->rope_scaling.factor, c->rope_scaling.low_freq_factor,
                 c->rope_scaling.high_freq_factor, c->rope_scaling.original_max_position_embeddings);
    else return 0;
    return 1;
}

// The pairs of the family's config.json into pairs (room for 48); returns how many.
static int build_pairs(const hf_config *c, out_pair *pairs) {
    int n = 0, gpt2 = c->model_type == HF_GPT2;
    for (int i = 0; i < N_PLAIN_KEYS; i++) {
        const key_spec *k = &plain_keys[i];
        if (!(k->families & 1u << c->model_type)) continue;
        if (k->kind == K_STRING && !((const char *)cfield(c, k))[0]) continue;  // torch_dtype unknown
        pairs[n].key = k->key;
        plain_text(c, k, pairs[n].value, sizeof pairs[n].value, 1);
        n++;
    }
    pairs[n].key = "model_type";
    snprintf(pairs[n++].value, sizeof pairs[0].value, "\"%s\"", hf_model_type_name(c->model_type));
    pairs[n].key = "architectures";
    snprintf(pairs[n++].value, sizeof pairs[0].value, "[\n    \"%s\"\n  ]", hf_architecture_name(c->model_type));
    if (c->bos_token_id >= 0) {
        pairs[n].key = "bos_token_id";
        snprintf(pairs[n++].value, sizeof pairs[0].value, "%" PRId64, c->bos_token_id);
    }
    if (c->n_eos > 0) {
        out_pair *p = &pairs[n++];
        p->key = "eos_token_id";
        size_t len = 0;
        if (c->eos_is_list) len += (size_t)snprintf(p->value, sizeof p->value, "[");
        for (int i = 0; i < c->n_eos && len < sizeof p->value; i++)
            len += (size_t)snprintf(p->value + len, sizeof p->value - len, "%s%s%" PRId64, i ? "," : "",
                                    c->eos_is_list ? "\n    " : "", c->eos_token_id[i]);
        if (c->eos_is_list && len < sizeof p->value) snprintf(p->value + len, sizeof p->value - len, "\n  ]");
    }
    if (gpt2) {
        pairs[n].key = "n_inner";
        if (c->intermediate_size == 4 * c->hidden_size) snprintf(pairs[n++].value, sizeof pairs[0].value, "null");
        else snprintf(pairs[n++].value, sizeof pairs[0].value, "%" PRId64, c->intermediate_size);
        return n;
    }
    pairs[n].key = "num_key_value_heads";
    snprintf(pairs[n++].value, sizeof pairs[0].value, "%" PRId64, c->num_key_value_heads);
    pairs[n].key = "head_dim";
    snprintf(pairs[n++].value, sizeof pairs[0].value, "%" PRId64, c->head_dim);
    pairs[n].key = "rope_scaling";
    const hf_rope_scaling *r = &c->rope_scaling;
    if (r->type == HF_ROPE_NONE) {
        snprintf(pairs[n++].value, sizeof pairs[0].value, "null");
    } else {
        char f[32], lo[32], hi[32];
        put_double(f, sizeof f, r->factor);
        put_double(lo, sizeof lo, r->low_freq_factor);
        put_double(hi, sizeof hi, r->high_freq_factor);
        snprintf(pairs[n++].value, sizeof pairs[0].value, "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n"
                 "    \"low_freq_factor\": %s,\n    \"original_max_position_embeddings\": %" PRId64 ",\n"
                 "    \"rope_type\": \"llama3\"\n  }", f, hi, lo, r->original_max_position_embeddings);
    }
    if (c->model_type != HF_LLAMA) {
        pairs[n].key = "sliding_window";
        if (c->sliding_window > 0) snprintf(pairs[n++].value, sizeof pairs[0].value, "%" PRId64, c->sliding_window);
        else snprintf(pairs[n++].value, sizeof pairs[0].value, "null");
    }
    return n;
}

fsdp_status hf_config_write(const hf_config *c, const char *path) {
    out_pair pairs[48];
    int n = build_pairs(c, pairs);
    qsort(pairs, (size_t)n, sizeof *pairs, cmp_pair);
    size_t cap = strlen(path) + 32;
    char *tmp = malloc(cap);  // (cap,)
    if (!tmp) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, cap, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fsdp_status s = fsdp_error(FSDP_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return s;
    }
    fprintf(f, "{\n");
    for (int i = 0; i < n; i++) fprintf(f, "  \"%s\": %s%s\n", pairs[i].key, pairs[i].value, i + 1 < n ? "," : "");
    fprintf(f, "}\n");
    int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) {
        free(tmp);
        return FSDP_OK;
    }
    fsdp_status s = fsdp_error(FSDP_ERR_IO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
    unlink(tmp);
    free(tmp);
    return s;
}
