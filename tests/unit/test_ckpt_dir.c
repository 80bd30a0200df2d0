// test_ckpt_dir.c: the checkpoint directory's names and marker: only names fsdp_ckpt_step_dir writes
// count as checkpoints (fsdp_ckpt_latest never returns a path that does not exist), and the DONE
// parser accepts what the writers write and rejects anything else with a one-line message.
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
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
    CHECK_EQ_INT(fsdp_ckpt_rotate(root, 1), FSDP_OK);
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

int main(void) {
    test_step_names();
    test_latest_ignores_lookalikes();
    test_marker();
    TEST_MAIN_END();
}
