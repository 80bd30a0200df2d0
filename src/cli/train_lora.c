// train_lora.c: fsdp-train's LoRA flags (train_lora.h).
#include "cli/train_lora.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/train_ckpt.h"

int train_lora_check(const char *prog, const train_lora_options *o, int given_alpha, int given_dropout,
                     int given_targets, const char *save_path, int rank) {
    const char *needs_rank = o->rank > 0        ? NULL
                             : given_alpha      ? "--lora-alpha"
                             : given_dropout    ? "--lora-dropout"
                             : given_targets    ? "--lora-targets"
                             : o->init          ? "--lora-init"
                             : o->merge_on_save ? "--lora-merge-on-save"
                                                : NULL;
    if (needs_rank) {
        if (rank == 0) fprintf(stderr, "%s: %s needs --lora-rank (without it there are no adapters)\n", prog, needs_rank);
        return 2;
    }
    if (o->merge_on_save && !save_path) {
        if (rank == 0) fprintf(stderr, "%s: --lora-merge-on-save needs --save (it says what --save writes)\n", prog);
        return 2;
    }
    return 0;
}

void train_lora_prefix(const nn_lm *m, char *prefix, size_t cap) {
    snprintf(prefix, cap, "base_model.model.%s", nn_lm_hf_prefix(m));
}

int train_lora_attach(const char *prog, const train_lora_options *o, nn_lm *m, unsigned *mask, int rank) {
    unsigned targets = 0;
    if (mask) *mask = 0;
    if (o->rank == 0) return 0;
    fsdp_status st = nn_lm_lora_targets(m, o->targets, &targets);
    if (st == FSDP_OK) st = nn_lm_add_lora(m, targets, o->rank, o->alpha, o->dropout);
    if (st != FSDP_OK) {
        if (rank == 0) fprintf(stderr, "%s: %s\n", prog, fsdp_last_error());
        return 2;
    }
    nn_params *ps = nn_lm_params(m);
    for (int i = 0; i < ps->count; i++)  // PEFT: the base model is frozen, only adapters train
        if (!ps->items[i].adapter) ps->items[i].frozen = 1;
    if (mask) *mask = targets;
    return 0;
}

fsdp_status train_lora_load(const train_lora_options *o, const nn_lm *m, fsdp_state *fs) {
    if (!o->rank || !o->init) return FSDP_OK;
    char prefix[64];
    train_lora_prefix(m, prefix, sizeof prefix);
    fsdp_status st = fsdp_load_adapters(fs, o->init, prefix);
    if (st == FSDP_OK) return st;
    char msg[1024];  // fsdp_error formats into the buffer fsdp_last_error() returns: copy it first
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    return fsdp_error(st, "--lora-init: %s", msg);
}

// PEFT's adapter_config.json beside an adapter_model.safetensors (rank 0), through a temporary file.
static fsdp_status write_adapter_config(const train_lora_options *o, const nn_lm *m, const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096], file[4200], tmp[4300];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(file, sizeof file, "%s/adapter_config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", file, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    unsigned mask = 0;
    nn_lm_lora_targets(m, o->targets, &mask);
    fprintf(f, "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"base_model_name_or_path\": \"%s\",\n"
               "  \"r\": %d,\n  \"lora_alpha\": %.9g,\n  \"lora_dropout\": %.9g,\n  \"bias\": \"none\",\n"
               "  \"fan_in_fan_out\": %s,\n  \"init_lora_weights\": true,\n  \"inference_mode\": true,\n"
               "  \"target_modules\": [", nn_lm_model_type(m), o->rank, (double)o->alpha, (double)o->dropout,
               nn_lm_conv1d(m) ? "true" : "false");
    for (int i = 0, n = 0; nn_lm_lora_target_name(m, i); i++)  // PEFT matches the module's last name
        if (mask & (1u << i)) {
            const char *name = nn_lm_lora_target_name(m, i), *dot = strrchr(name, '.');
            fprintf(f, "%s\"%s\"", n++ ? ", " : "", nn_lm_conv1d(m) ? name : dot ? dot + 1 : name);
        }
    fprintf(f, "]\n}\n");
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    fclose(f);
    if (bad || rename(tmp, file) != 0) {
        unlink(tmp);
        return fsdp_error(FSDP_ERR_IO, "%s: cannot write", file);
    }
    return FSDP_OK;
}

fsdp_status train_lora_save(const char *prog, const train_lora_options *o, fsdp_state *fs, const nn_lm *m,
                            const char *path, int rank) {
    int n_lora = 0;
    const nn_lora *lora = nn_lm_adapters(m, &n_lora);  // (n_lora,)
    if (!o->merge_on_save) {
        char prefix[64];
        train_lora_prefix(m, prefix, sizeof prefix);
        FSDP_CHECK(fsdp_save_params(fs, path, FSDP_PARAMS_ADAPTERS, prefix));
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (rank == 0 && strcmp(base, "adapter_model.safetensors") == 0) FSDP_CHECK(write_adapter_config(o, m, path));
        if (rank == 0)
            printf("%s: saved %d LoRA adapters (rank %d, PEFT's adapter_model layout) to %s\n", prog, n_lora,
                   o->rank, path);
        fflush(stdout);
        return FSDP_OK;
    }
    fsdp_low_rank_merge *merges = calloc((size_t)(n_lora ? n_lora : 1), sizeof *merges);  // (n_lora,)
    char (*names)[3][NN_NAME_MAX] = calloc((size_t)(n_lora ? n_lora : 1), sizeof *names);  // (n_lora, 3)
    if (!merges || !names) {
        free(merges);
        free(names);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_lora; i++) {  // "h.N.attn.c_attn.lora_A.weight" -> "h.N.attn.c_attn.weight"
        const nn_lora *a = &lora[i];
        size_t len = strlen(a->A->name) - strlen("lora_A.weight");
        snprintf(names[i][0], NN_NAME_MAX, "%.*sweight", (int)len, a->A->name);
        snprintf(names[i][1], NN_NAME_MAX, "%s", a->A->name);
        snprintf(names[i][2], NN_NAME_MAX, "%s", a->B->name);
        merges[i] = (fsdp_low_rank_merge){names[i][0], names[i][1], names[i][2], a->scale, nn_lm_conv1d(m)};
    }
    fsdp_status st = fsdp_merge_low_rank(fs, merges, n_lora);
    free(merges);
    free(names);
    FSDP_CHECK(st);
    FSDP_CHECK(fsdp_save_params(fs, path, FSDP_PARAMS_BASE, NULL));
    if (rank == 0) printf("%s: merged %d LoRA adapters into their weights (PEFT's merge_and_unload)\n", prog, n_lora);
    return cli_save_weights_report(prog, path, rank);
}
