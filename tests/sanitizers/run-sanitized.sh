#!/bin/sh
# run-sanitized.sh SUPPRESSIONS COMMAND...: runs one ctest test of the sanitized build (build-asan) so
# that any AddressSanitizer, LeakSanitizer or UBSan report fails it, whoever spawned the process that
# made it: the test itself, a Python test's subprocess, or a rank under mpirun (Open MPI hands its
# environment to the ranks it starts on this host).
# - ASan and LSan write their reports to files under a fresh directory (log_path), UBSan through the
#   hook in ubsan_report.c (it ignores log_path); so a test that swallows a child's stderr or expects
#   a failing exit (bad-input tests) cannot hide one. After the command, any report file fails the
#   test and is printed.
# - halt_on_error, and -fno-sanitize-recover=all at build time: the first finding stops the process,
#   with exit status 66, which fsdp_testlib.run() never takes for an expected failure.
# - A run whose only reports are LeakSanitizer's tracer crashing (it stops the world with ptrace at
#   exit and sometimes faults itself) is run once more, and if it crashes again, a third time without
#   the leak check (ASan and UBSan still on, and it says so); any other report fails at once.
# - fast_unwind_on_malloc=0: Open MPI is built without frame pointers, so only the slow unwinder sees
#   the Open MPI frames that the suppressions in SUPPRESSIONS (lsan.supp) name.
set -u
supp=$1
shift
common="halt_on_error=1:exitcode=66:log_exe_name=1"
common_asan="$common:detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
common_ubsan="$common:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# run_once: runs the command with a fresh report directory; sets rc, found (any report), and
# tracer_only (every report is LeakSanitizer's own tracer crashing: "Tracer caught signal", "LeakSanitizer
# has encountered a fatal error", which says nothing about the program and comes and goes with timing)
run_once() {
    reports=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-sanitizer.XXXXXX") || exit 1
    export ASAN_OPTIONS="$common_asan:log_path=$reports/report$extra_asan"
    export UBSAN_OPTIONS="$common_ubsan:log_path=$reports/report"
    # UBSan's reports (ubsan_report.c: it ignores log_path); not an FSDP_* name, which the tools would warn
    # about as an unregistered tunable (core/tunables.h)
    export SANITIZER_REPORTS_DIR="$reports"
    "$@"
    rc=$?
    found=0
    tracer_only=1
    for f in "$reports"/*; do
        [ -e "$f" ] || continue
        found=1
        echo "==== sanitizer report $f ====" >&2
        cat "$f" >&2
        if ! grep -q "LeakSanitizer has encountered a fatal error" "$f" ||
           grep -v -e "Tracer caught signal" -e "LeakSanitizer has encountered a fatal error" -e "HINT:" "$f" |
           grep -q .; then
            tracer_only=0
        fi
    done
    rm -rf "$reports"
}
extra_asan=
run_once "$@"
if [ "$found" = 1 ] && [ "$tracer_only" = 1 ]; then
    echo "NOTE: LeakSanitizer's tracer crashed (no finding about the program): running the test once more" >&2
    run_once "$@"
fi
if [ "$found" = 1 ] && [ "$tracer_only" = 1 ]; then
    # twice in a row (it does so in test_checkpoint's 4-rank resume of fsdp-train; an open problem): the
    # test runs a third time with ASan and UBSan but without the leak check, which is all that is lost
    echo "NOTE: LeakSanitizer's tracer crashed again: running the test without the leak check (ASan, UBSan on)" >&2
    extra_asan=":detect_leaks=0"
    run_once "$@"
fi
if [ "$found" = 1 ]; then
    echo "FAIL: sanitizer report(s) above (test exit status $rc)" >&2
    [ "$rc" = 0 ] && rc=1
fi
exit "$rc"
