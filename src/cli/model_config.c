// model_config.c: the model configuration and settings metadata of the files the tools write and read.
#include "cli/model_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/hf_config.h"
#include "ckpt/hf_dir.h"
#include "ckpt/safetensors.h"
#include "core/json_value.h"

static const cli_arg *find_flag(const cli_model_config *c, const char *flag) {
    for (int i = 0; i < c->nargs; i++)
        if (strcmp(c->args[i].name, flag) == 0) return &c->args[i];
    return NULL;
}

// Where a configuration is read from: a safetensors file's metadata, or a Hugging Face config.json.
typedef struct {
    const st_file *file;      // or NULL
    const hf_config *hf;      // or NULL
    char text[64];            // the last value asked of hf
} config_source;

// The value the source records for key, or NULL.
static const char *recorded_value(config_source *src, const char *key) {
    if (src->file) return st_metadata(src->file, key);
    return hf_config_value_text(src->hf, key, src->text, sizeof src->text) ? src->text : NULL;
}

static int check_and_take(const cli_model_config *c, config_source *src, const char *path) {
    const char *kind = recorded_value(src, "model_type");
    // a config.json of the Llama family (llama, mistral, qwen2: one architecture) builds a "llama" model
    int family = src->hf && !strcmp(c->model_type, "llama") && src->hf->model_type != HF_GPT2;
    if (strcmp(kind, c->model_type) != 0 && !family) {
        fprintf(stderr, "%s: %s records model_type %s; this tool builds %s\n", c->prog, path, kind, c->model_type);
        return -1;
    }
    for (int i = 0; i < c->n_fields; i++) {
        const cli_arg *a = find_flag(c, c->fields[i].flag);
        const char *recorded = recorded_value(src, c->fields[i].key);
        if (!a || !recorded) continue;
        char have[64];
        cli_value_text(a, have, sizeof have);
        if (cli_given(c->args, c->nargs, c->argc, c->argv, a->name) && strcmp(have, recorded) != 0) {
            fprintf(stderr, "%s: %s %s contradicts %s: it records %s %s (leave the flag out to use the file's)\n",
                    c->prog, a->name, have, path, c->fields[i].key, recorded);
            return -1;
        }
        if (cli_value_set(a, recorded) != 0) {
            fprintf(stderr, "%s: %s: metadata %s '%s' is not a valid %s value\n", c->prog, path, c->fields[i].key,
                    recorded, a->name);
            return -1;
        }
    }
    return 0;
}

// A Hugging Face model directory: its config.json.
static int config_from_hf_dir(const cli_model_config *c, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/%s", dir, HF_CONFIG_NAME);
    hf_config hf;
    if (hf_config_read(path, &hf) != FSDP_OK) {
        fprintf(stderr, "%s: %s\n", c->prog, fsdp_last_error());
        return -1;
    }
    config_source src = {NULL, &hf, ""};
    return check_and_take(c, &src, path);
}

int cli_config_from_file(const cli_model_config *c, const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return config_from_hf_dir(c, path);
    st_file *f = NULL;
    if (st_open(path, &f) != FSDP_OK) {
        fprintf(stderr, "%s: %s\n", c->prog, fsdp_last_error());
        return -1;
    }
    config_source src = {f, NULL, ""};
    int rc = st_metadata(f, "model_type") ? check_and_take(c, &src, path) : 0;
    st_close(f);
    return rc;
}

// The settings a resumed run takes from the checkpoint's "setting.<flag>" metadata unless the flag is
// given (on the command line or in --config): the sequence length, which the position table the
// checkpoint records (n_positions) bounds, so that --resume of a run made with --seq 16 needs no --seq.
static const char *const resumed_settings[] = {"--seq"};

static int settings_from_file(const cli_model_config *c, const char *path) {
    st_file *f = NULL;
    if (st_open(path, &f) != FSDP_OK) {
        fprintf(stderr, "%s: %s\n", c->prog, fsdp_last_error());
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < sizeof resumed_settings / sizeof *resumed_settings && rc == 0; i++) {
        const cli_arg *a = find_flag(c, resumed_settings[i]);
        char key[64];
        snprintf(key, sizeof key, "setting.%s", resumed_settings[i] + 2);
        const char *recorded = a ? st_metadata(f, key) : NULL;
        if (!recorded || cli_given(c->args, c->nargs, c->argc, c->argv, a->name)) continue;
        if (cli_value_set(a, recorded) != 0) {
            fprintf(stderr, "%s: %s: metadata %s '%s' is not a valid %s value\n", c->prog, path, key, recorded,
                    a->name);
            rc = -1;
        }
    }
    st_close(f);
    return rc;
}

int cli_config_from_inputs(const cli_model_config *c, const char *init_path, const cli_ckpt_options *ckpt) {
    if (init_path && cli_config_from_file(c, init_path)) return -1;
    char dir[4096], path[4200];
    int found = 0;
    // --resume DIR that is missing or not a directory: refused now, before any model is built; auto, and
    // a directory with nothing loadable, are reported where the checkpoint is loaded
    if (cli_ckpt_resume_dir(ckpt, dir, sizeof dir, &found) != FSDP_OK) {
        if (strcmp(ckpt->resume, "auto") == 0) return 0;
        fprintf(stderr, "%s: %s\n", c->prog, fsdp_last_error());
        return -1;
    }
    if (!found) return 0;
    fsdp_ckpt_meta_file(dir, path, sizeof path);
    if (access(path, F_OK) != 0) return 0;  // (missing: the load reports it)
    return cli_config_from_file(c, path) || settings_from_file(c, path) ? -1 : 0;
}

// the model_type path records into type (cap,), "" when none
static fsdp_status recorded_type(const char *path, char *type, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {  // a Hugging Face directory: its config.json's
        char json[4200];
        snprintf(json, sizeof json, "%.4000s/%s", path, HF_CONFIG_NAME);
        hf_config hf;
        FSDP_CHECK(hf_config_read(json, &hf));
        snprintf(type, cap, "%s", hf_model_type_name(hf.model_type));
        return FSDP_OK;
    }
    st_file *f = NULL;
    FSDP_CHECK(st_open(path, &f));
    const char *kind = st_metadata(f, "model_type");
    snprintf(type, cap, "%s", kind ? kind : "");
    st_close(f);
    return FSDP_OK;
}

fsdp_status cli_config_recorded_model_type(const char *init_path, const cli_ckpt_options *ckpt, char *type,
                                           size_t cap) {
    type[0] = 0;
    if (init_path) return recorded_type(init_path, type, cap);
    char dir[4096], path[4200];
    int found = 0;
    if (cli_ckpt_resume_dir(ckpt, dir, sizeof dir, &found) != FSDP_OK || !found) return FSDP_OK;
    fsdp_ckpt_meta_file(dir, path, sizeof path);
    if (access(path, F_OK) != 0 || recorded_type(path, type, cap) != FSDP_OK) type[0] = 0;
    return FSDP_OK;
}

int cli_config_to_state(const cli_model_config *c, fsdp_state *fs) {
    int cap = 1 + c->n_fields + c->nargs;
    const char **keys = calloc((size_t)cap, sizeof(char *));  // (cap,)
    const char **values = calloc((size_t)cap, sizeof(char *));  // (cap,)
    char *text = calloc((size_t)cap, 2 * 256);  // (cap, 2, 256) the keys and values built here
    int n = 0, rc = -1;
    if (keys && values && text) {
        keys[n] = "model_type";
        values[n++] = c->model_type;
        for (int i = 0; i < c->n_fields + c->nargs; i++) {
            const cli_arg *a = i < c->n_fields ? find_flag(c, c->fields[i].flag) : &c->args[i - c->n_fields];
            char *key = text + (size_t)n * 512, *value = key + 256;
            if (!a || !cli_value_text(a, value, 256)) continue;
            snprintf(key, 256, "%s", i < c->n_fields ? c->fields[i].key : "setting.");
            if (i >= c->n_fields) snprintf(key + 8, 248, "%s", a->name + 2);  // "--lr" -> "setting.lr"
            keys[n] = key;
            values[n++] = value;
        }
        rc = fsdp_set_file_metadata(fs, n, keys, values) == FSDP_OK ? 0 : -1;
        if (rc) fprintf(stderr, "%s: %s\n", c->prog, fsdp_last_error());
    } else {
        fprintf(stderr, "%s: out of memory\n", c->prog);
    }
    free(keys);
    free(values);
    free(text);
    return rc;
}

void cli_config_print(const cli_model_config *c, FILE *f) {
    fprintf(f, "  config:");
    for (int i = 0; i < c->nargs; i++) {
        const cli_arg *a = &c->args[i];
        char value[256];
        if (!cli_value_text(a, value, sizeof value)) continue;  // an unset string
        if (a->type == ARG_BOOL) {
            if (!strcmp(value, "true")) fprintf(f, " %s", a->name);
            continue;
        }
        fprintf(f, strpbrk(value, " \t\"") ? " %s \"%s\"" : " %s %s", a->name, value);
    }
    fprintf(f, "\n");
}

void cli_config_write_json(const cli_model_config *c, FILE *f) {
    fprintf(f, "{\"config\": {\"model_type\": ");
    json_write_string(f, c->model_type);
    for (int i = 0; i < c->nargs; i++) {
        const cli_arg *a = &c->args[i];
        char value[256];
        int set = cli_value_text(a, value, sizeof value);
        fprintf(f, ", ");
        json_write_string(f, a->name + 2);
        fprintf(f, ": ");
        if (!set) fprintf(f, "null");
        else if (a->type == ARG_STRING || a->type == ARG_CHOICE || a->type == ARG_LIST) json_write_string(f, value);
        else if (a->type == ARG_FLOAT && !strpbrk(value, "0123456789")) fprintf(f, "null");  // inf, nan
        else fprintf(f, "%s", value);  // an int, a float, true or false
    }
    fprintf(f, "}}\n");
    fflush(f);
}
