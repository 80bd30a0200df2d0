// test_path_canon.c: canonical paths of existing and not-yet-existing files (core/path_canon.h) and the
// checkpoint tools' output rule built on them (ckpt/ckpt_output.h): "..", ".", repeated slashes,
// relative paths and symlinks resolve to one spelling; nesting is by whole components; an output that
// is, lies in or holds the source, lies in a checkpoint, is named DONE or step_NNNNNNNN, or is a
// checkpoint root or non-empty directory is refused, and an empty or new directory is not.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_output.h"
#include "core/path_canon.h"
#include "test.h"

static char root[PATH_MAX];  // a fresh, canonical temporary directory

static void touch(const char *rel) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    test_write_bytes(path, "x", 1);
}

static void sub(const char *rel) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    CHECK(mkdir(path, 0755) == 0);
}

// path, relative to root (or absolute when it starts with '/'), canonicalizes to root + want
static void expect_canonical(const char *path, const char *want) {
    char in[PATH_MAX + 64], out[PATH_MAX], expected[PATH_MAX + 64];
    snprintf(in, sizeof in, path[0] == '/' ? "%s" : "%s/%s", path[0] == '/' ? path : root, path);
    snprintf(expected, sizeof expected, want[0] == '/' ? "%s" : "%s%s%s", want[0] == '/' ? want : root,
             *want ? "/" : "", want);
    CHECK(fsdp_path_canonical(in, out, sizeof out) == FSDP_OK);
    if (strcmp(out, expected) != 0) fprintf(stderr, "'%s': got '%s', expected '%s'\n", in, out, expected);
    CHECK(strcmp(out, expected) == 0);
}

static void test_canonical(void) {
    sub("a");
    sub("a/b");
    CHECK(symlink("a/b", "link") == 0);  // (the working directory is root)
    expect_canonical("a/b", "a/b");
    expect_canonical("a//b/./", "a/b");
    expect_canonical("a/b/../b/c", "a/b/c");           // c does not exist
    expect_canonical("a/new/../b/x/y", "a/b/x/y");     // ".." after a missing component, lexically
    expect_canonical("a/new/../../a", "a");
    expect_canonical("link/x", "a/b/x");                // the symlink resolved
    expect_canonical("link/../x", "a/x");               // ".." of a symlink: the kernel's (its target's parent)
    expect_canonical("/", "/");
    expect_canonical("/..", "/");
    char out[PATH_MAX], want[PATH_MAX + 16];
    CHECK(fsdp_path_canonical("a/b/missing", out, sizeof out) == FSDP_OK);  // relative to the working directory
    snprintf(want, sizeof want, "%s/a/b/missing", root);
    CHECK(strcmp(out, want) == 0);
    CHECK(fsdp_path_canonical("", out, sizeof out) != FSDP_OK);
    CHECK(fsdp_path_canonical("a/b", out, 4) != FSDP_OK);  // does not fit
    CHECK(fsdp_path_within("/x/y", "/x") && fsdp_path_within("/x", "/x") && fsdp_path_within("/x", "/"));
    CHECK(!fsdp_path_within("/xy", "/x") && !fsdp_path_within("/x", "/x/y"));
    fsdp_path_dirname("/x/y", out, sizeof out);
    CHECK(strcmp(out, "/x") == 0);
    fsdp_path_dirname("/x", out, sizeof out);
    CHECK(strcmp(out, "/") == 0);
    CHECK(strcmp(fsdp_path_basename("/x/y"), "y") == 0);
}

static void test_outputs(void) {
    sub("ck");
    sub("ck/step_00000002");
    touch("ck/step_00000002/DONE");
    touch("ck/step_00000002/index.safetensors");
    sub("other");
    sub("other/step_00000001");
    touch("other/step_00000001/DONE");
    sub("empty");
    sub("full");
    touch("full/f");
    const char *src = "ck/step_00000002";
    static const struct {
        const char *out;
        fsdp_ckpt_out_kind kind;
        int ok;
    } cases[] = {
        {"ck/step_00000002/index.safetensors", FSDP_CKPT_OUT_FILE, 0},
        {"ck/step_00000002/DONE", FSDP_CKPT_OUT_FILE, 0},
        {"ck/../ck/step_00000002", FSDP_CKPT_OUT_DIR, 0},
        {"ck/step_00000002/new", FSDP_CKPT_OUT_DIR, 0},
        {"ck", FSDP_CKPT_OUT_DIR, 0},
        {".", FSDP_CKPT_OUT_FILE, 0},
        {"other/step_00000001/model.safetensors", FSDP_CKPT_OUT_FILE, 0},
        {"empty/DONE", FSDP_CKPT_OUT_FILE, 0},
        {"empty/step_00000007", FSDP_CKPT_OUT_DIR, 0},
        {"other", FSDP_CKPT_OUT_DIR, 0},
        {"full", FSDP_CKPT_OUT_DIR, 0},
        {"ck/full.safetensors", FSDP_CKPT_OUT_FILE, 1},
        {"empty", FSDP_CKPT_OUT_DIR, 1},
        {"new_dir", FSDP_CKPT_OUT_DIR, 1},
        {"ck/step_00000002.safetensors", FSDP_CKPT_OUT_FILE, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fsdp_status st = fsdp_ckpt_check_output(src, cases[i].out, cases[i].kind);
        if ((st == FSDP_OK) != cases[i].ok) fprintf(stderr, "'%s': %s\n", cases[i].out, fsdp_last_error());
        CHECK_EQ_INT(st == FSDP_OK, cases[i].ok);
        if (st != FSDP_OK) CHECK(strstr(fsdp_last_error(), cases[i].out) && strstr(fsdp_last_error(), src));
    }
}

int main(void) {
    char tmpl[] = "/tmp/fsdp-path-XXXXXX";
    CHECK(mkdtemp(tmpl) != NULL);
    CHECK(realpath(tmpl, root) != NULL);  // (/tmp may itself be a symlink)
    CHECK(chdir(root) == 0);
    test_canonical();
    test_outputs();
    TEST_MAIN_END();
}
