// test_block_names.c: a parameter's block from its name (fsdp/block_names.h), and wrapping that scales
// with the parameters, not blocks x parameters.
// - Edge cases of the lookup: "h.01.x", "h.1x", "h.1" and a block past the last belong to no block of
//   "h.%d."; an empty tail takes the lowest block ("10x" is block 1's of "%d"); padded, signed and
//   left-justified conversions, a literal "%%", and a format the parse does not cover (the scan).
// - The lookup agrees with the scan over every block (the rule fsdp_wrap had) on generated names, for
//   each of those formats.
// - fsdp_wrap of a 20,000-block encoder stack: 20,000 units named 0..19999, each with its block's 12
//   parameters in the model's order and its element count; and a GPT-2's blocks then the root unit
//   (wte, wpe, ln_f) in model order. A wrap that is quadratic in the blocks again takes hours here: the
//   alarm below turns that into a failure (a generous bound, not a speed test; speed lives in bench/).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "fsdp/block_names.h"
#include "fsdp/fsdp.h"
#include "nn/encoder_stack.h"
#include "nn/gpt2.h"
#include "test.h"

enum { BIG_BLOCKS = 20000, ALARM_SECONDS = 30 };

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_block_names: fsdp_wrap of 20,000 blocks did not finish in 30 s (quadratic "
                              "in the blocks again?)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static int find(const char *format, int n, const char *name) {
    fsdp_block_names bn;
    fsdp_block_names_init(&bn, format, n);
    return fsdp_block_names_find(&bn, name);
}

// The rule by definition: the lowest block whose formatted prefix starts the name.
static int scan(const char *format, int n, const char *name) {
    for (int b = 0; b < n; b++) {
        char prefix[NN_NAME_MAX + 32];
        snprintf(prefix, sizeof prefix, format, b);
        if (strncmp(name, prefix, strlen(prefix)) == 0) return b;
    }
    return -1;
}

static void check_edge_cases(void) {
    CHECK_EQ_INT(find("h.%d.", 12, "h.1.attn.c_attn.weight"), 1);
    CHECK_EQ_INT(find("h.%d.", 12, "h.0.ln_1.weight"), 0);
    CHECK_EQ_INT(find("h.%d.", 12, "h.11.mlp.c_fc.bias"), 11);
    CHECK_EQ_INT(find("h.%d.", 12, "h.01.x"), -1);   // a leading zero: not block 1's
    CHECK_EQ_INT(find("h.%d.", 12, "h.00.x"), -1);
    CHECK_EQ_INT(find("h.%d.", 12, "h.1x"), -1);     // no tail after the number
    CHECK_EQ_INT(find("h.%d.", 12, "h.1"), -1);
    CHECK_EQ_INT(find("h.%d.", 12, "h.12.x"), -1);   // past the last block
    CHECK_EQ_INT(find("h.%d.", 12, "h..x"), -1);
    CHECK_EQ_INT(find("h.%d.", 12, "h.-1.x"), -1);
    CHECK_EQ_INT(find("h.%d.", 12, "wte.weight"), -1);
    CHECK_EQ_INT(find("h.%d.", 12, ""), -1);
    CHECK_EQ_INT(find("h.%d.", 0, "h.0.x"), -1);     // no blocks at all
    CHECK_EQ_INT(find("h.%d.", 100000, "h.99999.attn.bias"), 99999);
    CHECK_EQ_INT(find("h.%d.", 100000, "h.99999999999999999999.x"), -1);  // no overflow
    CHECK_EQ_INT(find("%d.", 12, "10.linear1.weight"), 10);
    CHECK_EQ_INT(find("%d.", 12, "1.linear1.weight"), 1);
    CHECK_EQ_INT(find("%d.", 12, "01.linear1.weight"), -1);
    CHECK_EQ_INT(find("%d", 12, "10x"), 1);          // empty tail: block 1's prefix "1" starts it first
    CHECK_EQ_INT(find("%d", 12, "0x"), 0);
    CHECK_EQ_INT(find("h.%03d.", 200, "h.007.x"), 7);
    CHECK_EQ_INT(find("h.%03d.", 200, "h.7.x"), -1);
    CHECK_EQ_INT(find("h.%03d.", 200, "h.0007.x"), -1);
    CHECK_EQ_INT(find("b%-3d|", 20, "b5  |w"), 5);
    CHECK_EQ_INT(find("b%3d|", 20, "b 15|w"), 15);
    CHECK_EQ_INT(find("L%+d.", 20, "L+3.w"), 3);
    CHECK_EQ_INT(find("L%+d.", 20, "L3.w"), -1);
    CHECK_EQ_INT(find("%%%d.", 20, "%5.w"), 5);
    CHECK_EQ_INT(find("%x.", 20, "a.w"), 10);        // not an integer conversion the parse covers: the scan
}

// The lookup and the scan agree on names around each format's prefixes.
static void check_against_scan(void) {
    static const char *formats[] = {"h.%d.", "%d.", "%d", "h.%03d.", "b%-3d|", "b%3d|", "L%+d.", "%%%d.", "x%ix", "%x."};
    static const char *tails[] = {"w", "", ".w", "0.w", "x", "|", " |", ".", "5.w"};
    const int n = 120;
    for (size_t f = 0; f < sizeof formats / sizeof *formats; f++)
        for (int v = -2; v < n + 15; v++)
            for (size_t t = 0; t < sizeof tails / sizeof *tails; t++) {
                char prefix[64], name[NN_NAME_MAX];
                snprintf(prefix, sizeof prefix, formats[f], v < 0 ? 0 : v);
                for (int cut = 0; cut < 2; cut++) {  // the prefix, and the prefix less its last character
                    size_t len = strlen(prefix) - (cut && prefix[0] ? 1 : 0);
                    snprintf(name, sizeof name, "%.*s%s%s", (int)len, prefix, v == -1 ? "0" : "", tails[t]);
                    int ours = find(formats[f], n, name), want = scan(formats[f], n, name);
                    if (ours != want) fprintf(stderr, "format '%s', name '%s': %d, the scan %d\n", formats[f], name, ours, want);
                    CHECK_EQ_INT(ours, want);
                }
            }
}

// The summary's unit rows (name, params, numel) and parameter lines (names), in order.
typedef struct {
    char *text;
    char **unit, **param;  // (n_units,), (n_params,) pointers into text
    long long *numel;      // (n_units,)
    int *n_unit_params;    // (n_units,)
    int n_units, n_params;
} summary;

static void summary_read(const fsdp_state *fs, int cap_units, int cap_params, summary *s) {
    memset(s, 0, sizeof *s);
    size_t len = 0;
    FILE *f = open_memstream(&s->text, &len);
    fsdp_print_summary(fs, f);
    fclose(f);
    s->unit = malloc(sizeof(char *) * (size_t)cap_units);
    s->param = malloc(sizeof(char *) * (size_t)cap_params);
    s->numel = malloc(sizeof(long long) * (size_t)cap_units);
    s->n_unit_params = malloc(sizeof(int) * (size_t)cap_units);
    for (char *line = strtok(s->text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64];
        int np;
        long long count, pad, shard, bytes;
        if (strncmp(line, "    ", 4) == 0 && s->n_params < cap_params) {
            char *p = line + 4;
            p[strcspn(p, " ")] = 0;
            s->param[s->n_params++] = p;
        } else if (sscanf(line, "%63s %d %lld %lld %lld %lld", name, &np, &count, &pad, &shard, &bytes) == 6 &&
                   s->n_units < cap_units) {
            line[strcspn(line, " ")] = 0;
            s->unit[s->n_units] = line;
            s->n_unit_params[s->n_units] = np;
            s->numel[s->n_units++] = count;
        }
    }
}

static void summary_free(summary *s) {
    free(s->text);
    free(s->unit);
    free(s->param);
    free(s->numel);
    free(s->n_unit_params);
}

static void check_big_wrap(fsdp_comm *world) {
    nn_block_config layer = nn_encoder_layer_defaults(4, 1);
    layer.d_ff = 4;
    nn_encoder_stack model;
    CHECK(nn_encoder_stack_create(&model, layer, BIG_BLOCKS) == FSDP_OK);
    int per_block = model.params.count / BIG_BLOCKS;
    CHECK_EQ_INT(per_block * BIG_BLOCKS, model.params.count);
    int64_t block_numel = 0;
    for (int i = 0; i < per_block; i++) block_numel += model.params.items[i].numel;
    fsdp_model_desc desc = {&model.params, &model.seq, "TransformerEncoderLayer", "%d.", 0};
    fsdp_state *fs = NULL;
    alarm(ALARM_SECONDS);
    CHECK(fsdp_wrap(&fs, desc, fsdp_config_default(), world) == FSDP_OK);
    alarm(0);
    if (!fs) return;
    CHECK_EQ_INT(fsdp_unit_count(fs), BIG_BLOCKS);  // every block a unit, no root
    summary s;
    summary_read(fs, BIG_BLOCKS + 1, model.params.count + 1, &s);
    CHECK_EQ_INT(s.n_units, BIG_BLOCKS);
    CHECK_EQ_INT(s.n_params, model.params.count);
    int bad_units = 0, bad_params = 0;
    for (int u = 0; u < s.n_units; u++) {
        char want[16];
        snprintf(want, sizeof want, "%d", u);
        bad_units += strcmp(s.unit[u], want) != 0 || s.n_unit_params[u] != per_block || s.numel[u] != block_numel;
    }
    for (int i = 0; i < s.n_params && i < model.params.count; i++)  // units in block order, each in model order
        bad_params += strcmp(s.param[i], model.params.items[i].name) != 0;
    CHECK_EQ_INT(bad_units, 0);
    CHECK_EQ_INT(bad_params, 0);
    summary_free(&s);
    fsdp_free_state(fs);
    nn_encoder_stack_free(&model);
}

static void check_gpt2_root(fsdp_comm *world) {
    nn_gpt2 model;
    nn_gpt2_config cfg = {16, 8, 3, 1, 8, 0.0f, 1e-5f};
    CHECK(nn_gpt2_create(&model, cfg) == FSDP_OK);
    fsdp_model_desc desc = {&model.params, &model.blocks, "GPT2Block", "h.%d.", 1};
    fsdp_state *fs = NULL;
    CHECK(fsdp_wrap(&fs, desc, fsdp_config_default(), world) == FSDP_OK);
    if (!fs) return;
    summary s;
    summary_read(fs, 8, model.params.count + 1, &s);
    CHECK_EQ_INT(s.n_units, 4);
    CHECK_EQ_INT(s.n_params, model.params.count);
    static const char *units[] = {"h.0", "h.1", "h.2", "(root)"};
    for (int u = 0; u < s.n_units && u < 4; u++) CHECK(strcmp(s.unit[u], units[u]) == 0);
    // the summary's order: each block's parameters, then the root's, each in model order
    int at = 0;
    for (int pass = 0; pass < 4; pass++) {
        fsdp_block_names bn;
        fsdp_block_names_init(&bn, "h.%d.", 3);
        for (int i = 0; i < model.params.count; i++) {
            int b = fsdp_block_names_find(&bn, model.params.items[i].name);
            if ((pass < 3 && b != pass) || (pass == 3 && b >= 0)) continue;
            CHECK(at < s.n_params && strcmp(s.param[at], model.params.items[i].name) == 0);
            at++;
        }
    }
    CHECK_EQ_INT(at, model.params.count);
    summary_free(&s);
    fsdp_free_state(fs);
    nn_gpt2_free(&model);
}

int main(int argc, char **argv) {
    signal(SIGALRM, on_alarm);
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) return 1;
    check_edge_cases();
    check_against_scan();
    check_gpt2_root(world);
    check_big_wrap(world);
    fsdp_comm_free(world);
    TEST_MAIN_END();
}
