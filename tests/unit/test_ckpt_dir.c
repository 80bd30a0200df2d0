// test_ckpt_dir.c: the checkpoint directory's names and marker: only names fsdp_ckpt_step_dir writes
// count as checkpoints (fsdp_ckpt_latest never returns a path that does not exist), and the DONE
// parser accepts what the writers write and rejects anything else with a one-line message. Lineages:
// rotation removes only the given run's older checkpoints (and older incomplete leftovers), archiving
// is journalled (entries it sets aside never count, recovery finishes it), rotation leftovers are
// cleared, and the directory's lock admits one holder at a time.
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>
#include <stdlib.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/ckpt_lock.h"
#include "ckpt/safetensors.h"
#include "test.h"

static void test_step_names(void) {
    static const struct {
        const char *name;
        int ok;
        int64_t step;
    } cases[] = {
        {"step_00000012", 1, 12},       {"step_00000000", 1, 0},     {"step_123456789", 1, 123456789},
        {"step_12", 0, 0},              {"step_000000012", 0, 0},    {"step_+0000012", 0, 0},
        {"step_ 0000012", 0, 0},        {"step_-0000012", 0, 0},     {"step_00000012x", 0, 0},
        {"step_00000012.tmp", 0, 0},    {"step_", 0, 0},             {"STEP_00000012", 0, 0},
        {"step_9999999999999999999", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t step = -1;
        int ok = fsdp_ckpt_parse_step_name(cases[i].name, &step);
        if (ok != cases[i].ok) fprintf(stderr, "'%s': got %d\n", cases[i].name, ok);
        CHECK_EQ_INT(ok, cases[i].ok);
        if (ok) CHECK_EQ_INT(step, cases[i].step);
    }
}

// A directory with a complete step_00000011 and look-alikes that are not checkpoints: latest is 11,
// and rotating leaves the look-alikes alone.
static void test_latest_ignores_lookalikes(void) {
    char root[256], path[512], out[512];
    snprintf(root, sizeof root, "/tmp/fsdp_ckpt_dir_test.%ld", (long)getpid());
    const char *dirs[] = {"step_00000011", "step_12", "step_000000013", "step_00000014.old"};
    CHECK_EQ_INT(mkdir(root, 0700), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        CHECK_EQ_INT(mkdir(path, 0700), 0);
        snprintf(path, sizeof path, "%s/%s/DONE", root, dirs[i]);
        test_write_bytes(path, "complete\n", 9);
    }
    int found = 0;
    CHECK_EQ_INT(fsdp_ckpt_latest(root, out, sizeof out, &found), FSDP_OK);
    snprintf(path, sizeof path, "%s/step_00000011", root);
    CHECK(found && !strcmp(out, path));
    CHECK_EQ_INT(fsdp_ckpt_rotate(root, 1, "0123456789abcdef"), FSDP_OK);
    for (int i = 0; i < 4; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/DONE", root, dirs[i]);
        CHECK(stat(path, &st) == 0);
        unlink(path);
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        rmdir(path);
    }
    CHECK_EQ_INT(rmdir(root), 0);
}

static void test_marker(void) {
    fsdp_marker_file files[3];
    int n = -1;
    const char *good = "complete\nindex.safetensors 0a1b2c3d\nmodel-2.safetensors ffffffff\n";
    CHECK_EQ_INT(fsdp_ckpt_parse_marker("x/DONE", good, strlen(good), files, 3, &n), FSDP_OK);
    CHECK_EQ_INT(n, 2);
    CHECK(!strcmp(files[0].name, "index.safetensors") && files[0].crc == 0x0a1b2c3du);
    CHECK(!strcmp(files[1].name, "model-2.safetensors") && files[1].crc == 0xffffffffu);
    CHECK_EQ_INT(fsdp_ckpt_parse_marker("x/DONE", "complete\n", 9, files, 3, &n), FSDP_OK);
    CHECK_EQ_INT(n, 0);
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"", "empty"},
        {"done\n", "line 1 must be 'complete'"},
        {"complete", "line 1 lacks its newline"},
        {"complete\na 0000000\n", "line 2: expected"},
        {"complete\na 000000000\n", "line 2: expected"},
        {"complete\na 0000000g\n", "line 2: expected"},
        {"complete\na  00000000\n", "line 2: expected"},
        {"complete\n../etc/passwd 00000000\n", "line 2: expected"},
        {"complete\nsub/file 00000000\n", "line 2: expected"},
        {"complete\n.hidden 00000000\n", "line 2: expected"},
        {"complete\na 00000000\nb 00000000\na 00000001\n", "line 4: 'a' is listed twice"},
        {"complete\na 00000000\nb 00000000\nc 00000000\nd 00000000\n", "more than 3 files"},
        {"complete\na 00000000", "line 2 lacks its newline"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fsdp_clear_error();
        fsdp_status s = fsdp_ckpt_parse_marker("x/DONE", bad[i].text, strlen(bad[i].text), files, 3, &n);
        const char *msg = fsdp_last_error();
        if (s != FSDP_ERR_FORMAT || !strstr(msg, bad[i].message)) fprintf(stderr, "case %zu: %s\n", i, msg);
        CHECK_EQ_INT(s, FSDP_ERR_FORMAT);
        CHECK(strncmp(msg, "x/DONE: ", 8) == 0 && strstr(msg, bad[i].message) && !strchr(msg, '\n'));
    }
    // A NUL inside a name is not a shorter name.
    CHECK_EQ_INT(fsdp_ckpt_parse_marker("x/DONE", "complete\na\0b 00000000\n", 22, files, 3, &n), FSDP_ERR_FORMAT);
}

// root/step_<step>: complete (DONE) or not, with index.safetensors recording run (NULL: no run id).
static void make_checkpoint(const char *root, int64_t step, const char *run, int complete) {
    char dir[512], path[600], val[32];
    fsdp_ckpt_step_dir(root, step, dir, sizeof dir);
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/index.safetensors", dir);
    st_writer *w = st_writer_new(path);
    CHECK(w != NULL);
    if (!w) return;
    snprintf(val, sizeof val, "%lld", (long long)step);
    CHECK_EQ_INT(st_writer_add_metadata(w, "step", val), FSDP_OK);
    if (run) CHECK_EQ_INT(st_writer_add_metadata(w, FSDP_CKPT_RUN_KEY, run), FSDP_OK);
    float x = 1.0f;
    int64_t shape[1] = {1};
    CHECK_EQ_INT(st_writer_add(w, "x", ST_F32, 1, shape, &x), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_OK);
    if (complete) {
        snprintf(path, sizeof path, "%s/DONE", dir);
        test_write_bytes(path, "complete\n", 9);
    }
}

static int exists(const char *root, const char *name) {
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", root, name);
    return stat(path, &st) == 0;
}

static void remove_all(const char *path) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    CHECK_EQ_INT(system(cmd), 0);
}

static void make_root(char *root, size_t cap, const char *what) {
    snprintf(root, cap, "/tmp/fsdp_ckpt_%s.%ld", what, (long)getpid());
    remove_all(root);
    CHECK_EQ_INT(mkdir(root, 0700), 0);
}

// keep 1 of run A: A's older ones go, as does an older incomplete entry; B's, the one without a run id
// and the incomplete one newer than A's newest stay.
static void test_rotate_by_run(void) {
    char root[256];
    make_root(root, sizeof root, "rotate");
    const char *A = "aaaaaaaaaaaaaaaa", *B = "bbbbbbbbbbbbbbbb";
    make_checkpoint(root, 0, A, 0);
    make_checkpoint(root, 1, A, 1);
    make_checkpoint(root, 2, B, 1);
    make_checkpoint(root, 3, A, 1);
    make_checkpoint(root, 4, NULL, 1);
    make_checkpoint(root, 5, A, 1);
    make_checkpoint(root, 6, A, 0);
    char id[64];
    int64_t step = 0;
    char dir[512];
    fsdp_ckpt_step_dir(root, 5, dir, sizeof dir);
    fsdp_ckpt_run_of(dir, id, sizeof id, &step);
    CHECK(!strcmp(id, A) && step == 5);
    CHECK_EQ_INT(fsdp_ckpt_rotate(root, 1, A), FSDP_OK);
    static const int kept[7] = {0, 0, 1, 0, 1, 1, 1};
    for (int s = 0; s < 7; s++) {
        char name[32];
        snprintf(name, sizeof name, "step_%08d", s);
        if (exists(root, name) != kept[s]) fprintf(stderr, "rotate: %s: %d\n", name, exists(root, name));
        CHECK_EQ_INT(exists(root, name), kept[s]);
    }
    DIR *d = opendir(root);  // nothing hidden left
    for (struct dirent *e; d && (e = readdir(d));) CHECK(strncmp(e->d_name, ".trash-", 7) != 0);
    if (d) closedir(d);
    CHECK_EQ_INT(fsdp_ckpt_rotate(root, 1, ""), FSDP_OK);  // no run: removes no complete checkpoint
    CHECK(exists(root, "step_00000002") && exists(root, "step_00000004") && exists(root, "step_00000005"));
    remove_all(root);
}

// An archiving killed after its journal: the entries it sets aside never count; recovery moves them.
static void test_archive_journal(void) {
    char root[256], out[512], path[700], where[600];
    make_root(root, sizeof root, "archive");
    for (int s = 1; s <= 4; s++) make_checkpoint(root, s, "aaaaaaaaaaaaaaaa", 1);
    snprintf(path, sizeof path, "%s/.archiving", root);
    test_write_bytes(path, "after 2 into x\n", 15);
    snprintf(path, sizeof path, "%s/.trash-step_00000000.1", root);  // a rotation's leftover
    CHECK_EQ_INT(mkdir(path, 0700), 0);
    int found = 0, n = 0;
    fsdp_ckpt_entry *list = NULL;
    CHECK_EQ_INT(fsdp_ckpt_latest(root, out, sizeof out, &found), FSDP_OK);
    CHECK(found && strstr(out, "step_00000002"));
    CHECK_EQ_INT(fsdp_ckpt_list(root, &list, &n), FSDP_OK);
    CHECK(n == 2 && list[1].step == 2);
    free(list);
    CHECK_EQ_INT(fsdp_ckpt_recover(root), FSDP_OK);
    CHECK(!exists(root, ".archiving") && !exists(root, ".trash-step_00000000.1"));
    CHECK(exists(root, "archive/x/step_00000003/DONE") && exists(root, "archive/x/step_00000004/DONE"));
    CHECK(!exists(root, "step_00000003") && exists(root, "step_00000002"));
    int moved = -1;  // a whole archiving: everything newer than step 1, with its reason
    CHECK_EQ_INT(fsdp_ckpt_archive(root, 1, "why", "the reason", where, sizeof where, &moved), FSDP_OK);
    CHECK(moved == 1 && strstr(where, "-why") && !exists(root, "step_00000002") && exists(root, "step_00000001"));
    snprintf(path, sizeof path, "%s/ARCHIVED", where);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == 11);
    CHECK_EQ_INT(fsdp_ckpt_archive(root, 1, "why", "again", where, sizeof where, &moved), FSDP_OK);
    CHECK_EQ_INT(moved, 0);  // nothing newer: nothing made
    snprintf(path, sizeof path, "%s/.archiving", root);  // a damaged journal is an error naming it
    test_write_bytes(path, "garbage\n", 8);
    fsdp_clear_error();
    CHECK_EQ_INT(fsdp_ckpt_latest(root, out, sizeof out, &found), FSDP_ERR_FORMAT);
    CHECK(strstr(fsdp_last_error(), ".archiving") != NULL);
    remove_all(root);
}

// One holder at a time (a second open file description of the same process is refused, naming the
// holder); released, the next one takes it.
static void test_lock(void) {
    char root[256], pid[32];
    make_root(root, sizeof root, "lock");
    int fd = -1, fd2 = -1;
    CHECK_EQ_INT(fsdp_ckpt_lock(root, &fd), FSDP_OK);
    fsdp_clear_error();
    CHECK_EQ_INT(fsdp_ckpt_lock(root, &fd2), FSDP_ERR_IO);
    snprintf(pid, sizeof pid, "pid %ld,", (long)getpid());
    CHECK(strstr(fsdp_last_error(), "in use by another job") && strstr(fsdp_last_error(), pid));
    CHECK_EQ_INT(fd2, -1);
    fsdp_ckpt_unlock(fd);
    CHECK_EQ_INT(fsdp_ckpt_lock(root, &fd2), FSDP_OK);
    fsdp_ckpt_unlock(fd2);
    char id[FSDP_CKPT_RUN_ID_LEN + 1], id2[FSDP_CKPT_RUN_ID_LEN + 1];
    CHECK_EQ_INT(fsdp_ckpt_new_run_id(id), FSDP_OK);
    CHECK_EQ_INT(fsdp_ckpt_new_run_id(id2), FSDP_OK);
    CHECK(strlen(id) == FSDP_CKPT_RUN_ID_LEN && strspn(id, "0123456789abcdef") == FSDP_CKPT_RUN_ID_LEN &&
          strcmp(id, id2) != 0);
    remove_all(root);
}

int main(void) {
    test_step_names();
    test_latest_ignores_lookalikes();
    test_marker();
    test_rotate_by_run();
    test_archive_journal();
    test_lock();
    TEST_MAIN_END();
}
