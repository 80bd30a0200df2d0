// fsdp_run.c: fsdp-run, the launcher. `fsdp-run -n N [--hostfile F | -H hosts] [--tag-output] [--] TOOL
// [ARGS...]` starts `mpirun` with what the tools want: --allow-run-as-root when running as root, binding
// that matches their threads-per-rank policy (core/threads.h: threads = the cores a rank may use), and
// --oversubscribe when N exceeds those cores. TOOL is a path, or a bare name (fsdp-train, ...) found
// next to fsdp-run's own executable before PATH. mpirun's stdout passes through; its stderr goes
// through fsdp-run, which drops Open MPI's multi-line help boxes (a line of dashes, the text, a line of
// dashes) and prints each distinct line once (the ranks' identical errors: once). SIGINT/SIGTERM (a
// terminal's Ctrl-C included) are passed to the ranks on this machine, which stop, save and exit 130,
// their output delivered; a second one ends the job through mpirun (see "Signals" below). Exit status:
// the failing rank's exit code (mpirun returns the first; 130 for an interrupted run that saved), 1
// when a second signal ended the job, 128 + signal when a rank was killed by a signal, 127 when TOOL
// (or mpirun) cannot be found, 2 for fsdp-run's own usage errors.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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
               "from stderr and identical lines printed once. SIGINT/SIGTERM (Ctrl-C) go to the ranks on this\n"
               "machine: the tools stop after the step, save (--ckpt-dir) and exit 130; a second one ends the job\n"
               "at once (exit 1). Exit status: the failing rank's (130: interrupted and saved), 128+signal for a\n"
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

// Signals. mpirun runs in a process group of its own, so a terminal's Ctrl-C reaches fsdp-run alone
// (the ranks have groups of their own already), and every SIGINT/SIGTERM goes through here: the handler
// only writes the signal into a pipe, which the output loop reads. The first one is passed to the job's
// ranks on this machine: the tools stop after the current step (every rank, as one of them was asked),
// save with --ckpt-dir and exit 130, which mpirun, not itself signalled, returns after delivering all
// their output. A second one, SIGHUP, or a first one before any rank runs here goes to mpirun, which
// ends the job at once (a signalled mpirun stops forwarding output and exits 1, which fsdp-run returns:
// 130 says the run stopped and saved, 1 that it may not have).
static int signal_pipe[2] = {-1, -1};
static void on_signal(int sig) {
    unsigned char s = (unsigned char)sig;
    int saved = errno;
    (void)!write(signal_pipe[1], &s, 1);
    errno = saved;
}

// The parent of pid from /proc/PID/stat (0 when it cannot be read).
static pid_t parent_of(pid_t pid) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    const char *close = strrchr(text, ')');  // the command name may hold spaces and parentheses
    int ppid = 0;
    return close && sscanf(close + 1, " %*c %d", &ppid) == 1 ? (pid_t)ppid : 0;
}

// Whether pid is an MPI rank: its environment holds Open MPI's OMPI_COMM_WORLD_RANK (mpirun's other
// children, ssh and orted, have none).
static int is_rank(pid_t pid) {
    static const char key[] = "OMPI_COMM_WORLD_RANK=";
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int found = 0;
    char *entry = NULL;  // one NUL-terminated entry at a time
    size_t cap = 0;
    while (!found && getdelim(&entry, &cap, 0, f) > 0) found = strncmp(entry, key, sizeof key - 1) == 0;
    free(entry);
    fclose(f);
    return found;
}

// Sends sig to the ranks mpirun (pid launcher) started on this machine: its descendants that are
// ranks. Returns how many were signalled.
static int signal_local_ranks(pid_t launcher, int sig) {
    DIR *d = opendir("/proc");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1 || pid == launcher) continue;
        pid_t up = parent_of((pid_t)pid);
        for (int depth = 0; up > 1 && up != launcher && depth < 64; depth++) up = parent_of(up);
        if (up == launcher && is_rank((pid_t)pid) && kill((pid_t)pid, sig) == 0) n++;
    }
    if (d) closedir(d);
    return n;
}

static int signals_seen;  // SIGINT/SIGTERM received so far

static void handle_signal(pid_t launcher, int sig) {
    if (sig != SIGHUP && signals_seen++ == 0 && signal_local_ranks(launcher, sig) > 0) return;
    kill(launcher, sig);
}

// One complete line of mpirun's stderr (with its '\n', or the last one without): Open MPI's help boxes
// dropped, each distinct line printed once.
static void stderr_line(const char *line, int *in_box) {
    if (dashes(line)) {
        *in_box = !*in_box;
        return;
    }
    if (*in_box || seen_before(line)) return;
    fputs(line, stderr);
    fflush(stderr);
}

// Copies mpirun's stderr (fd) through stderr_line until it closes, handling the signals that arrive
// meanwhile.
static void pump_stderr(int fd, pid_t launcher) {
    char *line = NULL;  // (cap,) the line being assembled, NUL-terminated
    size_t len = 0, cap = 0;
    int in_box = 0;
    for (;;) {
        struct pollfd fds[2] = {{fd, POLLIN, 0}, {signal_pipe[0], POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        unsigned char sig;
        if ((fds[1].revents & POLLIN) && read(signal_pipe[0], &sig, 1) == 1) handle_signal(launcher, sig);
        if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (cap - len < 4097) {
            char *grown = realloc(line, cap ? 2 * cap : 8192);
            if (!grown) break;
            line = grown;
            cap = cap ? 2 * cap : 8192;
        }
        ssize_t got = read(fd, line + len, cap - len - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        len += (size_t)got;
        line[len] = 0;
        char *start = line, *nl;
        while ((nl = memchr(start, '\n', len - (size_t)(start - line)))) {  // every complete line
            char keep = nl[1];
            nl[1] = 0;
            stderr_line(start, &in_box);
            nl[1] = keep;
            start = nl + 1;
        }
        len -= (size_t)(start - line);
        memmove(line, start, len + 1);
    }
    if (len) stderr_line(line, &in_box);
    free(line);
}

// mpirun's command line for TOOL (tool) and its arguments args[0..nargs), on `ranks` ranks. cmd:
// (16 + nargs,) np, map: (32,), (64,) text it points into.
static void mpirun_command(char **cmd, char *np, char *map, long ranks, const char *hostfile, const char *hosts,
                           int tag, char *tool, char **args, int nargs) {
    int c = 0;
    cmd[c++] = "mpirun";
    if (geteuid() == 0) cmd[c++] = "--allow-run-as-root";
    snprintf(np, 32, "%ld", ranks);
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
            snprintf(map, 64, per > 1 ? "slot:PE=%ld" : "slot", per);
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
    for (int k = 0; k < nargs; k++) cmd[c++] = args[k];
    cmd[c] = NULL;
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
    mpirun_command(cmd, np, map, ranks, hostfile, hosts, tag, tool, argv + i + 1, argc - i - 1);

    int pipefd[2];
    if (pipe(pipefd) != 0 || pipe(signal_pipe) != 0) {
        fprintf(stderr, "%s: cannot create a pipe: %s\n", prog, strerror(errno));
        return 1;
    }
    // the handlers before the fork: a signal from then on is seen (mpirun's child resets them at exec)
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: cannot fork: %s\n", prog, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);  // a group of its own: the terminal's Ctrl-C reaches fsdp-run only (above)
        if (isatty(0)) {  // outside the terminal's foreground group a read of it would stop mpirun
            int null = open("/dev/null", O_RDONLY);
            if (null >= 0) dup2(null, 0);
        }
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        close(pipefd[1]);
        close(signal_pipe[0]);
        close(signal_pipe[1]);
        execvp(cmd[0], cmd);
        fprintf(stderr, "%s: cannot run mpirun: %s (is Open MPI installed and on PATH?)\n", prog, strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);  // (as the child does: whichever runs first, no Ctrl-C reaches mpirun's group)
    close(pipefd[1]);
    pump_stderr(pipefd[0], pid);  // stderr: boxes dropped, each distinct line once
    close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    for (int k = 0; k < n_seen; k++) free(seen[k]);
    free(cmd);
    // mpirun's status: the first failing rank's exit code, 128 + signal for a rank killed by one (Open
    // MPI 4.1 returns both itself); 128 + signal too when mpirun itself was killed
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;  // (1 too from a signalled mpirun)
}
