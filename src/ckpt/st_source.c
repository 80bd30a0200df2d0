// st_source.c: one file or a Hugging Face directory's shards as one set of tensors (st_source.h).
#include "ckpt/st_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json_value.h"

#define INDEX_NAME "model.safetensors.index.json"
#define ADAPTER_NAME "adapter_model.safetensors"  // (shorter than INDEX_NAME: the buffer fits both)

typedef struct {
    const st_entry *e;
    int file;  // index into files
} source_entry;

struct st_source {
    char *path;
    int is_dir;
    int n_files;
    st_file **files;        // (n_files,)
    int n;
    source_entry *entries;  // (n,) sorted by name
};

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const source_entry *)a)->e->name, ((const source_entry *)b)->e->name);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void st_source_close(st_source *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) st_close(s->files[i]);
    free(s->files);
    free(s->entries);
    free(s->path);
    free(s);
}

const char *st_source_path(const st_source *s) { return s->path; }
int st_source_is_dir(const st_source *s) { return s->is_dir; }
int st_source_count(const st_source *s) { return s->n; }
int st_source_file_count(const st_source *s) { return s->n_files; }
const st_file *st_source_file_at(const st_source *s, int i) { return s->files[i]; }

const st_entry *st_source_entry_at(const st_source *s, int i, const st_file **file) {
    if (file) *file = s->files[s->entries[i].file];
    return s->entries[i].e;
}

// The position of `name` in the sorted entries, or -1.
static int find_index(const st_source *s, const char *name) {
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(s->entries[mid].e->name, name);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

const st_entry *st_source_find(const st_source *s, const char *name, const st_file **file) {
    int i = find_index(s, name);
    if (i < 0) return NULL;
    return st_source_entry_at(s, i, file);
}

// Opens path as the n_files-th file (files has room).
static fsdp_status add_file(st_source *s, const char *path) {
    FSDP_CHECK(st_open(path, &s->files[s->n_files]));
    s->n_files++;
    return FSDP_OK;
}

// Collects every file's tensors in name order; a tensor in two files is an error.
static fsdp_status index_entries(st_source *s) {
    int total = 0;
    for (int i = 0; i < s->n_files; i++) total += st_count(s->files[i]);
    s->entries = malloc(sizeof *s->entries * (size_t)(total ? total : 1));
    if (!s->entries) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", s->path);
    for (int i = 0; i < s->n_files; i++)
        for (int k = 0; k < st_count(s->files[i]); k++) s->entries[s->n++] = (source_entry){st_entry_at(s->files[i], k), i};
    qsort(s->entries, (size_t)s->n, sizeof *s->entries, cmp_entry);
    for (int i = 1; i < s->n; i++)
        if (!strcmp(s->entries[i - 1].e->name, s->entries[i].e->name))
            return fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' is in two shards: %s and %s", s->path,
                              s->entries[i].e->name, st_path(s->files[s->entries[i - 1].file]),
                              st_path(s->files[s->entries[i].file]));
    return FSDP_OK;
}

// A source of the one file at path.
static fsdp_status open_single(st_source *s, const char *path) {
    if (!(s->files = calloc(1, sizeof *s->files))) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    FSDP_CHECK(add_file(s, path));
    return index_entries(s);
}

// A shard name of the index: a plain file name in the directory.
static int plain_file_name(const char *name) {
    return name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

// The index's weight_map against the opened shards (file names: (n_files,) as the index spells them).
static fsdp_status check_index(const st_source *s, const json_value *map, const char *index_path, char **names) {
    for (int i = 0; i < map->count; i++) {
        const char *tensor = map->keys[i], *shard = map->items[i].string;
        int at = find_index(s, tensor);
        if (at < 0)
            return fsdp_error(FSDP_ERR_MISSING, "%s: tensor '%s' is listed in shard %s, which does not hold it",
                              index_path, tensor, shard);
        if (strcmp(names[s->entries[at].file], shard) != 0)
            return fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' is listed in shard %s but is in %s", index_path, tensor,
                              shard, names[s->entries[at].file]);
    }
    for (int i = 0; i < s->n; i++)
        if (!json_get(map, s->entries[i].e->name))
            return fsdp_error(FSDP_ERR_FORMAT, "%s: tensor '%s' is not listed in %s's weight_map",
                              st_path(s->files[s->entries[i].file]), s->entries[i].e->name, INDEX_NAME);
    return FSDP_OK;
}

// A sharded directory: the index, its shards, and the checks between them.
static fsdp_status open_index(st_source *s, const char *index_path) {
    json_value root;
    FSDP_CHECK(json_parse_file(index_path, "JSON", &root));
    const json_value *map = json_get(&root, "weight_map"), *meta = json_get(&root, "metadata");
    fsdp_status st = FSDP_OK;
    if (!map || map->type != JSON_OBJECT)
        st = fsdp_error(FSDP_ERR_FORMAT, "%s: expected an object with a \"weight_map\" object", index_path);
    else if (meta && meta->type != JSON_OBJECT && meta->type != JSON_NULL)
        st = fsdp_error(FSDP_ERR_FORMAT, "%s: \"metadata\" must be an object", index_path);
    else if (map->count == 0)
        st = fsdp_error(FSDP_ERR_FORMAT, "%s: the weight_map lists no tensor", index_path);
    char **names = st == FSDP_OK ? malloc(sizeof *names * (size_t)map->count) : NULL;  // (count,) shard names
    if (st == FSDP_OK && !names) st = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", index_path);
    int n_names = 0;
    for (int i = 0; st == FSDP_OK && i < map->count; i++) {
        const json_value *v = &map->items[i];
        if (v->type != JSON_STRING || !plain_file_name(v->string))
            st = fsdp_error(FSDP_ERR_FORMAT, "%s: weight_map entry '%s' must be a shard file name in the directory",
                            index_path, map->keys[i]);
        else names[n_names++] = v->string;
    }
    if (st == FSDP_OK) qsort(names, (size_t)n_names, sizeof *names, cmp_str);
    int unique = 0;
    for (int i = 0; st == FSDP_OK && i < n_names; i++)
        if (i == 0 || strcmp(names[i], names[unique - 1])) names[unique++] = names[i];
    if (st == FSDP_OK && !(s->files = calloc((size_t)unique, sizeof *s->files)))
        st = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", index_path);
    for (int i = 0; st == FSDP_OK && i < unique; i++) {
        size_t cap = strlen(s->path) + strlen(names[i]) + 2;
        char *shard = malloc(cap);  // (cap,)
        struct stat sb;
        if (!shard) {
            st = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", index_path);
            break;
        }
        snprintf(shard, cap, "%s/%s", s->path, names[i]);
        if (stat(shard, &sb) != 0) {
            const char *tensor = "?";
            for (int k = 0; k < map->count; k++)
                if (!strcmp(map->items[k].string, names[i])) tensor = map->keys[k];
            st = fsdp_error(FSDP_ERR_MISSING, "%s: shard %s (listed for tensor '%s') does not exist", index_path,
                            names[i], tensor);
        } else {
            st = add_file(s, shard);
        }
        free(shard);
    }
    if (st == FSDP_OK) st = index_entries(s);
    if (st == FSDP_OK) st = check_index(s, map, index_path, names);
    free(names);
    json_value_free(&root);
    return st;
}

// A directory: model.safetensors, else the index and its shards, else PEFT's adapter_model.safetensors.
static fsdp_status open_dir(st_source *s) {
    size_t cap = strlen(s->path) + sizeof INDEX_NAME + 2;
    char *file = malloc(cap);  // (cap,)
    if (!file) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", s->path);
    struct stat sb;
    fsdp_status st;
    snprintf(file, cap, "%s/model.safetensors", s->path);
    if (stat(file, &sb) == 0) {
        st = open_single(s, file);
    } else {
        snprintf(file, cap, "%s/%s", s->path, INDEX_NAME);
        if (stat(file, &sb) == 0) {
            st = open_index(s, file);
        } else {  // a PEFT adapter directory: its one weights file
            snprintf(file, cap, "%s/%s", s->path, ADAPTER_NAME);
            st = stat(file, &sb) == 0 ? open_single(s, file)
                                      : fsdp_error(FSDP_ERR_MISSING, "%s: no model.safetensors or %s in the directory",
                                                   s->path, INDEX_NAME);
        }
    }
    free(file);
    return st;
}

fsdp_status st_source_open(const char *path, st_source **out) {
    *out = NULL;
    st_source *s = calloc(1, sizeof *s);
    size_t len = strlen(path);
    if (!s || !(s->path = malloc(len + 1))) {
        free(s);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(s->path, path, len + 1);
    while (len > 1 && s->path[len - 1] == '/') s->path[--len] = 0;  // "dir/" names "dir" in messages
    struct stat sb;
    s->is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    fsdp_status st;
    if (s->is_dir) {
        st = open_dir(s);
    } else {
        st = open_single(s, path);
    }
    if (st != FSDP_OK) {
        st_source_close(s);
        return st;
    }
    *out = s;
    return FSDP_OK;
}
