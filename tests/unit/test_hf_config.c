// test_hf_config.c: config.json for the Llama family and GPT-2 (ckpt/hf_config.h) and the JSON tree
// under it (core/json_value.h): real configs' values and the classes' defaults, every error one line
// naming the file and the key, the writer's output read back to the same struct, and which directories
// hf_dir_check_target lets a save replace. (tests/ckpt/test_hf_dir.py drives GPT-2 directories end to end.)
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/hf_config.h"
#include "ckpt/hf_dir.h"
#include "core/json_value.h"
#include "test.h"

static char dir[256];

// Writes text as dir/name and returns the path (a static buffer).
static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    test_write_bytes(path, text, strlen(text));
    return path;
}

// Reads text as a config: the status, and *c.
static fsdp_status read_text(const char *text, hf_config *c) {
    return hf_config_read(write_file("config.json", text), c);
}

// The error text must be one line naming config.json and every needle (NULL-terminated list).
static void check_error(const char *text, fsdp_status want, const char *needle1, const char *needle2) {
    hf_config c;
    fsdp_status s = read_text(text, &c);
    const char *msg = fsdp_last_error();
    int ok = s == want && strstr(msg, "config.json") && !strchr(msg, '\n') && strstr(msg, needle1) &&
             (!needle2 || strstr(msg, needle2));
    if (!ok) fprintf(stderr, "for %s\n  got status %d: %s\n", text, (int)s, msg);
    CHECK(ok);
}

// Llama 3.2 1B's config.json as published (GQA, tied, llama3 rope scaling, an eos list).
static const char *const llama32 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"head_dim\": 64,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 8192,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
    " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

static void test_llama(void) {
    hf_config c;
    CHECK(read_text(llama32, &c) == FSDP_OK);
    CHECK_EQ_INT(c.model_type, HF_LLAMA);
    CHECK_EQ_INT(c.vocab_size, 128256);
    CHECK_EQ_INT(c.hidden_size, 2048);
    CHECK_EQ_INT(c.intermediate_size, 8192);
    CHECK_EQ_INT(c.num_hidden_layers, 16);
    CHECK_EQ_INT(c.num_attention_heads, 32);
    CHECK_EQ_INT(c.num_key_value_heads, 8);
    CHECK_EQ_INT(c.head_dim, 64);
    CHECK_EQ_INT(c.max_position_embeddings, 131072);
    CHECK_NEAR(c.norm_eps, 1e-5, 0);
    CHECK_NEAR(c.rope_theta, 500000.0, 0);
    CHECK_EQ_INT(c.rope_scaling.type, HF_ROPE_LLAMA3);
    CHECK_NEAR(c.rope_scaling.factor, 32.0, 0);
    CHECK_NEAR(c.rope_scaling.low_freq_factor, 1.0, 0);
    CHECK_NEAR(c.rope_scaling.high_freq_factor, 4.0, 0);
    CHECK_EQ_INT(c.rope_scaling.original_max_position_embeddings, 8192);
    CHECK_EQ_INT(c.tie_word_embeddings, 1);
    CHECK_EQ_INT(c.qkv_bias + c.o_bias + c.mlp_bias, 0);
    CHECK(strcmp(c.hidden_act, "silu") == 0 && strcmp(c.torch_dtype, "bfloat16") == 0);
    CHECK_EQ_INT(c.bos_token_id, 128000);
    CHECK_EQ_INT(c.n_eos, 3);
    CHECK_EQ_INT(c.eos_is_list, 1);
    CHECK_EQ_INT(c.eos_token_id[2], 128009);
    CHECK_EQ_INT(c.sliding_window, 0);
    char text[64];
    CHECK(hf_config_value_text(&c, "num_hidden_layers", text, sizeof text) && strcmp(text, "16") == 0);
    CHECK(hf_config_value_text(&c, "num_key_value_heads", text, sizeof text) && strcmp(text, "8") == 0);
    CHECK(hf_config_value_text(&c, "tie_word_embeddings", text, sizeof text) && strcmp(text, "true") == 0);
    CHECK(hf_config_value_text(&c, "model_type", text, sizeof text) && strcmp(text, "llama") == 0);
    CHECK(!hf_config_value_text(&c, "n_layer", text, sizeof text));  // GPT-2's key
}

// The classes' defaults: only the sizes given.
static void test_defaults(void) {
    hf_config c;
    CHECK(read_text("{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,"
                    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": null,"
                    " \"attention_bias\": true, \"rope_scaling\": {\"type\": \"default\"}}", &c) == FSDP_OK);
    CHECK_EQ_INT(c.num_key_value_heads, 4);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.max_position_embeddings, 2048);
    CHECK_NEAR(c.norm_eps, 1e-6, 0);
    CHECK_NEAR(c.rope_theta, 10000.0, 0);
    CHECK_EQ_INT(c.rope_scaling.type, HF_ROPE_NONE);
    CHECK_EQ_INT(c.tie_word_embeddings, 0);
    CHECK_EQ_INT(c.qkv_bias, 1);  // attention_bias: all four projections
    CHECK_EQ_INT(c.o_bias, 1);
    CHECK_EQ_INT(c.bos_token_id, -1);
    CHECK_EQ_INT(c.n_eos, 0);
    CHECK(strcmp(c.hidden_act, "silu") == 0 && c.torch_dtype[0] == 0);
    // qwen2: q/k/v biases, o_proj without; its sliding window off unless use_sliding_window
    CHECK(read_text("{\"model_type\": \"qwen2\", \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,"
                    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                    " \"sliding_window\": 131072, \"use_sliding_window\": false, \"max_window_layers\": 2,"
                    " \"eos_token_id\": 7, \"dtype\": \"float32\"}", &c) == FSDP_OK);
    CHECK_EQ_INT(c.model_type, HF_QWEN2);
    CHECK_EQ_INT(c.qkv_bias, 1);
    CHECK_EQ_INT(c.o_bias, 0);
    CHECK_EQ_INT(c.max_position_embeddings, 32768);
    CHECK_EQ_INT(c.n_eos, 1);
    CHECK_EQ_INT(c.eos_is_list, 0);
    CHECK(strcmp(c.torch_dtype, "float32") == 0);  // transformers 4.56's "dtype"
    // mistral without a window (v0.3); a window as wide as the positions changes nothing either
    CHECK(read_text("{\"model_type\": \"mistral\", \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,"
                    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
                    " \"sliding_window\": null}", &c) == FSDP_OK);
    CHECK_EQ_INT(c.model_type, HF_MISTRAL);
    CHECK_EQ_INT(c.qkv_bias + c.o_bias, 0);
    CHECK(read_text("{\"model_type\": \"mistral\", \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,"
                    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 512,"
                    " \"sliding_window\": 512}", &c) == FSDP_OK);
    // gpt2: n_inner null is 4 n_embd, tied by default
    CHECK(read_text("{\"model_type\": \"gpt2\", \"vocab_size\": 50257, \"n_embd\": 768, \"n_layer\": 12, \"n_head\": 12,"
                    " \"n_positions\": 1024, \"n_inner\": null}", &c) == FSDP_OK);
    CHECK_EQ_INT(c.intermediate_size, 3072);
    CHECK_EQ_INT(c.tie_word_embeddings, 1);
    CHECK_NEAR(c.norm_eps, 1e-5, 0);
    CHECK(strcmp(c.hidden_act, "gelu_new") == 0);
    char text[64];
    CHECK(hf_config_value_text(&c, "n_layer", text, sizeof text) && strcmp(text, "12") == 0);
    CHECK(hf_config_value_text(&c, "n_positions", text, sizeof text) && strcmp(text, "1024") == 0);
}

#define SIZES "\"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2"

static void test_errors(void) {
    check_error("{\"model_type\": \"bert\", " SIZES "}", FSDP_ERR_INVALID_ARG, "model_type", "bert");
    check_error("{" SIZES "}", FSDP_ERR_FORMAT, "model_type", NULL);
    check_error("{\"model_type\": \"llama\", " SIZES "}", FSDP_ERR_FORMAT, "num_attention_heads", "missing");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 5}", FSDP_ERR_INVALID_ARG,
                "num_attention_heads", "hidden_size");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
                FSDP_ERR_INVALID_ARG, "num_key_value_heads", "divide");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 0}", FSDP_ERR_INVALID_ARG,
                "num_attention_heads", "positive");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}",
                FSDP_ERR_INVALID_ARG, "hidden_act", "gelu");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"rope_scaling\": "
                "{\"rope_type\": \"yarn\", \"factor\": 4.0}}", FSDP_ERR_INVALID_ARG, "rope_scaling", "yarn");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"rope_scaling\": "
                "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0}}", FSDP_ERR_FORMAT,
                "rope_scaling.high_freq_factor", "missing");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"rope_scaling\": 2}",
                FSDP_ERR_FORMAT, "rope_scaling", NULL);
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"rope_theta\": \"big\"}",
                FSDP_ERR_FORMAT, "rope_theta", "number");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"tie_word_embeddings\": 1}",
                FSDP_ERR_FORMAT, "tie_word_embeddings", "true or false");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"num_key_value_heads\": 2.5}",
                FSDP_ERR_FORMAT, "num_key_value_heads", "integer");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"eos_token_id\": [1, \"x\"]}",
                FSDP_ERR_FORMAT, "eos_token_id", NULL);
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"torch_dtype\": \"int8\"}",
                FSDP_ERR_INVALID_ARG, "torch_dtype", "int8");
    check_error("{\"model_type\": \"llama\", " SIZES ", \"num_attention_heads\": 4, \"attention_dropout\": 1.5}",
                FSDP_ERR_INVALID_ARG, "attention_dropout", NULL);
    // sliding windows: mistral's default (4096) below its positions, qwen2's when switched on
    check_error("{\"model_type\": \"mistral\", " SIZES ", \"num_attention_heads\": 4}", FSDP_ERR_INVALID_ARG,
                "sliding_window", "not supported");
    check_error("{\"model_type\": \"qwen2\", " SIZES ", \"num_attention_heads\": 4, \"use_sliding_window\": true,"
                " \"sliding_window\": 1024}", FSDP_ERR_INVALID_ARG, "sliding_window", "use_sliding_window");
    check_error("{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_embd\": 10, \"n_layer\": 1, \"n_head\": 4, "
                "\"n_positions\": 8}", FSDP_ERR_INVALID_ARG, "n_head", "n_embd");
    check_error("{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_embd\": 8, \"n_layer\": 1, \"n_head\": 4, "
                "\"n_positions\": 8, \"activation_function\": \"relu\"}", FSDP_ERR_INVALID_ARG, "activation_function",
                "relu");
    // malformed JSON: the file and the byte
    check_error("{\"model_type\": \"llama\",, }", FSDP_ERR_FORMAT, "invalid JSON", "byte");
    check_error("{\"model_type\": \"llama\", \"model_type\": \"llama\"}", FSDP_ERR_FORMAT, "repeated", NULL);
    check_error("[1, 2]", FSDP_ERR_FORMAT, "JSON object", NULL);
    check_error("{\"a\": 01}", FSDP_ERR_FORMAT, "invalid JSON", NULL);
    check_error("{\"a\": tru}", FSDP_ERR_FORMAT, "invalid JSON", NULL);
    check_error("{\"a\": 1} x", FSDP_ERR_FORMAT, "invalid JSON", NULL);
    hf_config c;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nonexistent/config.json", dir);
    CHECK(hf_config_read(missing, &c) == FSDP_ERR_MISSING && strstr(fsdp_last_error(), "cannot open"));
}

// Each field of a and b alike (the writer's output read back).
static void check_same(const hf_config *a, const hf_config *b) {
    CHECK_EQ_INT(a->model_type, b->model_type);
    CHECK_EQ_INT(a->vocab_size, b->vocab_size);
    CHECK_EQ_INT(a->hidden_size, b->hidden_size);
    CHECK_EQ_INT(a->intermediate_size, b->intermediate_size);
    CHECK_EQ_INT(a->num_hidden_layers, b->num_hidden_layers);
    CHECK_EQ_INT(a->num_attention_heads, b->num_attention_heads);
    CHECK_EQ_INT(a->num_key_value_heads, b->num_key_value_heads);
    CHECK_EQ_INT(a->head_dim, b->head_dim);
    CHECK_EQ_INT(a->max_position_embeddings, b->max_position_embeddings);
    CHECK(a->norm_eps == b->norm_eps && a->rope_theta == b->rope_theta);
    CHECK(a->attention_dropout == b->attention_dropout);
    CHECK(!memcmp(&a->rope_scaling, &b->rope_scaling, sizeof a->rope_scaling));
    CHECK_EQ_INT(a->tie_word_embeddings, b->tie_word_embeddings);
    CHECK_EQ_INT(a->qkv_bias, b->qkv_bias);
    CHECK_EQ_INT(a->o_bias, b->o_bias);
    CHECK_EQ_INT(a->mlp_bias, b->mlp_bias);
    CHECK(!strcmp(a->hidden_act, b->hidden_act) && !strcmp(a->torch_dtype, b->torch_dtype));
    CHECK_EQ_INT(a->bos_token_id, b->bos_token_id);
    CHECK_EQ_INT(a->n_eos, b->n_eos);
    CHECK_EQ_INT(a->eos_is_list, b->eos_is_list);
    for (int i = 0; i < a->n_eos; i++) CHECK_EQ_INT(a->eos_token_id[i], b->eos_token_id[i]);
    CHECK_EQ_INT(a->sliding_window, b->sliding_window);
    CHECK_EQ_INT(a->use_sliding_window, b->use_sliding_window);
}

static void test_write(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/written.json", dir);
    hf_config a, b;
    CHECK(read_text(llama32, &a) == FSDP_OK);
    a.norm_eps = 1e-5, a.rope_theta = 500000.0, a.attention_dropout = 0.1;
    CHECK(hf_config_write(&a, path) == FSDP_OK);
    CHECK(hf_config_read(path, &b) == FSDP_OK);
    check_same(&a, &b);
    json_value v;  // what from_pretrained reads: architectures, model_type, the values as JSON types
    CHECK(json_parse_file(path, "JSON", &v) == FSDP_OK);
    const json_value *arch = json_get(&v, "architectures"), *eps = json_get(&v, "rms_norm_eps");
    CHECK(arch && arch->type == JSON_ARRAY && arch->count == 1 && !strcmp(arch->items[0].string, "LlamaForCausalLM"));
    CHECK(eps && eps->type == JSON_NUMBER && eps->number == 1e-5 && !eps->is_integer);
    CHECK(json_get(&v, "num_key_value_heads") && json_get(&v, "num_key_value_heads")->integer == 8);
    CHECK(json_get(&v, "sliding_window") == NULL);  // not a llama key
    for (int i = 1; i < v.count; i++) CHECK(strcmp(v.keys[i - 1], v.keys[i]) < 0);  // sorted, as save_pretrained
    json_value_free(&v);
    // qwen2, mistral and gpt2 from the defaults
    for (int t = HF_MISTRAL; t <= HF_GPT2; t++) {
        hf_config_defaults((hf_model_type)t, &a);
        a.vocab_size = 50, a.hidden_size = 48, a.intermediate_size = t == HF_GPT2 ? 192 : 80;
        a.num_hidden_layers = 3, a.num_attention_heads = 6, a.num_key_value_heads = t == HF_GPT2 ? 6 : 2;
        a.head_dim = 8, a.max_position_embeddings = 4096, a.sliding_window = 0;
        a.bos_token_id = 1, a.n_eos = 1, a.eos_token_id[0] = 2;
        snprintf(a.torch_dtype, sizeof a.torch_dtype, "bfloat16");
        CHECK(hf_config_validate(&a, path) == FSDP_OK);
        CHECK(hf_config_write(&a, path) == FSDP_OK);
        fsdp_status s = hf_config_read(path, &b);
        if (s != FSDP_OK) fprintf(stderr, "%s: %s\n", hf_model_type_name((hf_model_type)t), fsdp_last_error());
        CHECK(s == FSDP_OK);
        check_same(&a, &b);
        CHECK(json_parse_file(path, "JSON", &v) == FSDP_OK);
        CHECK(json_get(&v, "architectures") && !strcmp(json_get(&v, "architectures")->items[0].string,
                                                       hf_architecture_name((hf_model_type)t)));
        CHECK((json_get(&v, "n_embd") != NULL) == (t == HF_GPT2));
        CHECK((json_get(&v, "n_inner") && json_get(&v, "n_inner")->type == JSON_NULL) == (t == HF_GPT2));
        json_value_free(&v);
    }
    snprintf(path, sizeof path, "%s/no_such_dir/config.json", dir);
    CHECK(hf_config_write(&a, path) == FSDP_ERR_IO);
}

// hf_dir_check_target: absent, empty or ours may be replaced; a file, foreign files or weights without a
// config.json may not.
static void test_dir_target(void) {
    char d[512], p[600];
    snprintf(d, sizeof d, "%s/target", dir);
    CHECK(hf_dir_check_target(d) == FSDP_OK);
    mkdir(d, 0755);
    CHECK(hf_dir_check_target(d) == FSDP_OK);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    test_write_bytes(p, "x", 1);
    CHECK(hf_dir_check_target(d) == FSDP_ERR_INVALID_ARG && strstr(fsdp_last_error(), "no config.json"));
    snprintf(p, sizeof p, "%s/config.json", d);
    test_write_bytes(p, "{}", 2);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    test_write_bytes(p, "{}", 2);
    CHECK(hf_dir_check_target(d) == FSDP_OK);
    snprintf(p, sizeof p, "%s/model-1-of-2.safetensors", d);  // not save_pretrained's spelling
    test_write_bytes(p, "x", 1);
    CHECK(hf_dir_check_target(d) == FSDP_ERR_INVALID_ARG && strstr(fsdp_last_error(), "model-1-of-2.safetensors"));
    snprintf(p, sizeof p, "%s/config.json", dir);
    CHECK(hf_dir_check_target(p) == FSDP_ERR_INVALID_ARG && strstr(fsdp_last_error(), "not a directory"));
    char name[64];
    hf_shard_name(0, 1, name, sizeof name);
    CHECK(!strcmp(name, "model.safetensors"));
    hf_shard_name(2, 12, name, sizeof name);
    CHECK(!strcmp(name, "model-00003-of-00012.safetensors"));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/fsdp-test-hf-config-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    test_llama();
    test_defaults();
    test_errors();
    test_write();
    test_dir_target();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    TEST_MAIN_END();
}
