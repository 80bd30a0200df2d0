// state_dict.c: load/save named parameters through the safetensors reader and writer.
#include "ckpt/state_dict.h"

#include <stdio.h>

#include "ckpt/safetensors.h"

fsdp_status nn_params_load(const char *path, nn_params *ps, const char *alt_prefix) {
    st_file *f = NULL;
    FSDP_CHECK(st_open(path, &f));
    fsdp_status s = FSDP_OK;
    for (int i = 0; i < ps->count && s == FSDP_OK; i++) {
        nn_param *p = &ps->items[i];
        const char *name = p->name;
        char alt[NN_NAME_MAX + 64];
        if (!st_find(f, name) && alt_prefix) {
            snprintf(alt, sizeof alt, "%s%s", alt_prefix, p->name);
            if (st_find(f, alt)) name = alt;
        }
        s = st_read_f32(f, name, p->data, p->ndim, p->shape);
    }
    st_close(f);
    return s;
}

fsdp_status nn_params_save(const char *path, const nn_params *ps, fsdp_save_what what) {
    st_writer *w = st_writer_new(path);
    if (!w) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < ps->count; i++) {
        const nn_param *p = &ps->items[i];
        const float *src = what == FSDP_SAVE_GRADS ? p->grad : p->data;
        fsdp_status s = st_writer_add(w, p->name, ST_F32, p->ndim, p->shape, src);
        if (s != FSDP_OK) {
            st_writer_free(w);
            return s;
        }
    }
    return st_writer_commit(w);
}
