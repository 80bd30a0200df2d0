// fsdp_run.c: fsdp-run, the launcher. `fsdp-run -n N [--hostfile F | -H hosts] [--tag-output] [--] TOOL
// [ARGS...]` starts `mpirun` with what the tools want: --allow-run-as-root when running as root, binding
// that matches their threads-per-rank policy (core/threads.h: threads = the cores a rank may use), and
// --oversubscribe when N exceeds those cores. TOOL is a path, or a bare name (fsdp-train, ...) found
// next to fsdp-run's own executable before PATH. mpirun's stdout passes through; its stderr goes
// through fsdp-run, which drops Open MPI's multi-line help boxes (a line of dashes, the text, a line of
// dashes) and prints each distinct line once (the ranks' identical errors: once). Exit status: the
// failing rank's exit code (mpirun returns the first), 128 + signal when a rank was killed by a signal,
// 127 when TOOL (or mpirun) cannot be found, 2 for fsdp-run's own usage errors.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#endif
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *prog = "fsdp-run";

static int usage_text(FILE *f) {
    fprintf(f, "usage: %s -n N [--hostfile FILE | -H HOSTS] [--tag-output] [--] TOOL [ARGS...]\n"
               "Starts TOOL (fsdp-train, fsdp-minimal, ... or a path) on N MPI ranks through mpirun.\n"
               "  -n, -np N          ranks (default 1)\n"
               "  --hostfile FILE    hosts to run on (mpirun's --hostfile); without it, this machine\n"
               "  -H, --host HOSTS   comma-separated hosts (mpirun's -H)\n"
               "  --tag-output       prefix each output line with its rank's tag, e.g. [1,0]<stdout>:\n"
               "  -h, --help         this text\n"
               "On this machine: --bind-to core with cores/N cores per rank when N <= the usable cores, else\n"
               "--bind-to none --oversubscribe (the tools then yield while waiting). --allow-run-as-root as root.\n"
               "A bare TOOL name is looked up next to fsdp-run, then on PATH. Open MPI's help boxes are dropped\n"
               "from stderr and identical lines printed once. Exit status: the failing rank's, 128+signal for a\n"
               "rank killed by a signal, 127 when TOOL is not found, 2 for a usage error.\n", prog);
    return f == stdout ? 0 : 2;
}

static int usage_error(const char *what, const char *arg) {
    fprintf(stderr, "%s: %s%s%s (see --help)\n", prog, what, arg ? ": " : "", arg ? arg : "");
    return 2;
}

static int executable(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

// TOOL as a path to run: as given when it holds a '/', else next to /proc/self/exe, else on PATH.
// out: (cap,) Returns 0, or -1 when there is none.
static int resolve_tool(const char *tool, char *out, size_t cap) {
    if (strchr(tool, '/')) {
        snprintf(out, cap, "%s", tool);
        return executable(out) ? 0 : -1;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            snprintf(out, cap, "%s/%s", self, tool);
            if (executable(out)) return 0;
        }
    }
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t len = strcspn(path, ":");
        snprintf(out, cap, "%.*s/%s", (int)len, len ? path : ".", tool);
        if (executable(out)) return 0;
        path += len + (path[len] == ':');
    }
    return -1;
}

// Each distinct stderr line is printed once: the lines seen so far (at most MAX_SEEN; past that,
// lines are printed as they come).
#define MAX_SEEN 4096
static char *seen[MAX_SEEN];  // (n_seen,) malloc'ed copies
static int n_seen;

static int seen_before(const char *line) {
    for (int i = 0; i < n_seen; i++)
        if (!strcmp(seen[i], line)) return 1;
    if (n_seen < MAX_SEEN && (seen[n_seen] = strdup(line))) n_seen++;
    return 0;
}

// A line of dashes (Open MPI's help boxes begin and end with one).
static int dashes(const char *line) {
    size_t n = strspn(line, "-");
    return n >= 20 && (line[n] == 0 || line[n] == '\n');
}

// SIGINT/SIGTERM sent to fsdp-run (kill: si_code <= 0) are passed to mpirun, which passes them to the
// ranks. A terminal's Ctrl-C (si_code SI_KERNEL) reached mpirun already, being in the same process
// group: passing it again would be mpirun's second SIGINT, which aborts at once instead of letting the
// ranks save their checkpoint.
static volatile sig_atomic_t child_pid;
static void forward(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (child_pid > 0 && (!info || info->si_code <= 0)) kill((pid_t)child_pid, sig);
}

int main(int argc, char **argv) {
    long ranks = 1;
    const char *hostfile = NULL, *hosts = NULL;
    int tag = 0, i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage_text(stdout);
        if (!strcmp(a, "--tag-output")) {
            tag = 1;
            continue;
        }
        int takes = !strcmp(a, "-n") || !strcmp(a, "-np") || !strcmp(a, "--hostfile") || !strcmp(a, "-H") ||
                    !strcmp(a, "--host");
        if (!takes) return usage_error("unknown option", a);
        if (i + 1 >= argc) return usage_error("expected a value after", a);
        const char *v = argv[++i];
        if (a[1] == 'n') {
            char *end = NULL;
            errno = 0;
            ranks = strtol(v, &end, 10);
            if (!*v || *end || errno || ranks < 1 || ranks > 1000000)
                return usage_error("-n: expected a positive number of ranks, got", v);
        } else if (!strcmp(a, "--hostfile")) {
            hostfile = v;
        } else {
            hosts = v;
        }
    }
    if (hostfile && hosts) return usage_error("--hostfile and -H both given (one list of hosts)", NULL);
    if (i >= argc) return usage_error("expected a TOOL to run", NULL);
    char tool[PATH_MAX + 256];
    if (resolve_tool(argv[i], tool, sizeof tool)) {
        fprintf(stderr, "%s: %s: tool not found (looked next to fsdp-run and on PATH)\n", prog, argv[i]);
        return 127;
    }

    // mpirun's command line. argv of the child: (16 + argc,)
    char **cmd = calloc((size_t)argc + 16, sizeof(char *));
    char np[32], map[64];
    if (!cmd) return 1;
    int c = 0;
    cmd[c++] = "mpirun";
    if (geteuid() == 0) cmd[c++] = "--allow-run-as-root";
    snprintf(np, sizeof np, "%ld", ranks);
    cmd[c++] = "-n";
    cmd[c++] = np;
    if (hostfile) {
        cmd[c++] = "--hostfile";
        cmd[c++] = (char *)hostfile;
    } else if (hosts) {
        cmd[c++] = "-H";
        cmd[c++] = (char *)hosts;
    } else {  // this machine: the cores this process may use decide the binding
        cpu_set_t set;
        long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
        if (cores < 1) cores = 1;
        if (ranks <= cores) {  // each rank bound to cores/N cores of its own: its threads use them all
            long per = cores / ranks;
            snprintf(map, sizeof map, per > 1 ? "slot:PE=%ld" : "slot", per);
            cmd[c++] = "--bind-to";
            cmd[c++] = "core";
            cmd[c++] = "--map-by";
            cmd[c++] = map;
        } else {  // more ranks than cores: unbound, and mpirun must allow it
            cmd[c++] = "--oversubscribe";
            cmd[c++] = "--bind-to";
            cmd[c++] = "none";
        }
    }
    if (tag) cmd[c++] = "--tag-output";
    cmd[c++] = tool;
    for (int k = i + 1; k < argc; k++) cmd[c++] = argv[k];
    cmd[c] = NULL;

    int pipefd[2];
    if (pipe(pipefd) != 0) {
        fprintf(stderr, "%s: cannot create a pipe: %s\n", prog, strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: cannot fork: %s\n", prog, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        close(pipefd[1]);
        execvp(cmd[0], cmd);
        fprintf(stderr, "%s: cannot run mpirun: %s (is Open MPI installed and on PATH?)\n", prog, strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);
    child_pid = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    // stderr: boxes dropped, each distinct line once
    FILE *err = fdopen(pipefd[0], "r");
    char *line = NULL;
    size_t cap = 0;
    int in_box = 0;
    while (err && getline(&line, &cap, err) >= 0) {
        if (dashes(line)) {
            in_box = !in_box;
            continue;
        }
        if (in_box || seen_before(line)) continue;
        fputs(line, stderr);
        fflush(stderr);
    }
    free(line);
    if (err) fclose(err);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    for (int k = 0; k < n_seen; k++) free(seen[k]);
    free(cmd);
    // mpirun's status: the first failing rank's exit code, 128 + signal for a rank killed by one (Open
    // MPI 4.1 returns both itself); 128 + signal too when mpirun itself was killed
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
