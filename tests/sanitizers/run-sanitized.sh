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
# - fast_unwind_on_malloc=0: Open MPI is built without frame pointers, so only the slow unwinder sees
#   the Open MPI frames that the suppressions in SUPPRESSIONS (lsan.supp) name.
set -u
supp=$1
shift
reports=$(mktemp -d "${TMPDIR:-/tmp}/fsdp-sanitizer.XXXXXX") || exit 1
common="halt_on_error=1:exitcode=66:log_path=$reports/report:log_exe_name=1"
export ASAN_OPTIONS="$common:detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="$common:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export FSDP_SANITIZER_REPORTS="$reports"  # UBSan's reports (ubsan_report.c): it ignores log_path
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
"$@"
rc=$?
found=0
for f in "$reports"/*; do
    [ -e "$f" ] || continue
    found=1
    echo "==== sanitizer report $f ====" >&2
    cat "$f" >&2
done
rm -rf "$reports"
if [ "$found" = 1 ]; then
    echo "FAIL: sanitizer report(s) above (test exit status $rc)" >&2
    [ "$rc" = 0 ] && rc=1
fi
exit "$rc"
