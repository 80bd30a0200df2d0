// lora_sites.c: see lora_sites.h.
#include "nn/lora_sites.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fsdp_status nn_lora_parse_targets(const nn_lora_site *sites, int n_sites, const char *list, const char *model,
                                  const char *expected, unsigned *mask) {
    *mask = 0;
    for (const char *at = list; at && *at;) {
        size_t len = strcspn(at, ",");
        unsigned bit = 0;
        for (int i = 0; i < n_sites; i++) {
            const char *full = sites[i].name, *dot = strchr(full, '.');
            const char *last = dot ? dot + 1 : full;
            if ((strlen(full) == len && strncmp(full, at, len) == 0) ||
                (strlen(last) == len && strncmp(last, at, len) == 0))
                bit |= sites[i].bit;
        }
        if (!bit)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "--lora-targets: '%.*s' is not a projection of %s (expected %s)",
                              (int)len, at, model, expected);
        *mask |= bit;
        at += len + (at[len] == ',');
    }
    if (!*mask) return fsdp_error(FSDP_ERR_INVALID_ARG, "--lora-targets: expected at least one projection");
    return FSDP_OK;
}

fsdp_status nn_lora_attach(nn_lora **pool, int *n, nn_params *ps, const nn_lora_site *sites, int n_sites,
                           nn_linear *const *layers, int n_layer, const char *prefix_format, unsigned targets,
                           int r, float alpha, float dropout) {
    if (*pool) return fsdp_error(FSDP_ERR_INVALID_ARG, "the model already has adapters");
    if (r < 1) return fsdp_error(FSDP_ERR_INVALID_ARG, "--lora-rank: expected a rank of at least 1, got %d", r);
    int per = 0;
    for (int i = 0; i < n_sites; i++) per += (targets & sites[i].bit) != 0;
    if (!per) return fsdp_error(FSDP_ERR_INVALID_ARG, "--lora-targets: expected at least one projection");
    *pool = calloc((size_t)per * (size_t)n_layer, sizeof(nn_lora));
    if (!*pool) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for the adapters");
    *n = 0;
    for (int b = 0; b < n_layer; b++) {
        char block[48], prefix[112];
        snprintf(block, sizeof block, prefix_format, b);
        for (int i = 0; i < n_sites; i++) {
            if (!(targets & sites[i].bit)) continue;
            nn_linear *l = layers[(size_t)b * (size_t)n_sites + (size_t)i];
            snprintf(prefix, sizeof prefix, "%s%s.", block, sites[i].name);
            nn_lora *a = &(*pool)[(*n)++];
            nn_lora_init(a, ps, prefix, l->in, l->out, r, alpha, dropout, b, 16 + i);
            l->lora = a;
        }
    }
    return FSDP_OK;
}
