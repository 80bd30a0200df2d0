#!/bin/sh
# gen-flags-doc.sh: writes docs/flags.md, the flags of every fsdp.c tool, from the tools' own --help.
#   scripts/gen-flags-doc.sh build/bin > docs/flags.md
# Deterministic: the output depends only on the binaries (a fixed locale, and none of the environment
# variables the tools read for their defaults). tests/train/test_flags_doc.py fails when docs/flags.md
# differs from what this prints for the built tools: rerun it after changing a flag.
# A tool listed here that is not built is an error (exit 1, nothing printed to stdout). A new tool (or
# subcommand): add a line to TOOLS; tests/train/test_flags_doc.py reads the same list.
set -eu
bin=${1:?usage: $0 BIN_DIR (e.g. build/bin)}
# "TOOL [SUBCOMMAND]" per line, in the order of the document
TOOLS='fsdp-run
fsdp-train
fsdp-minimal
fsdp-plan
fsdp-plan train
fsdp-plan minimal
fsdp-ckpt
fsdp-ckpt info
fsdp-ckpt verify
fsdp-ckpt consolidate
fsdp-ckpt reshard
fsdp-ckpt convert'

help_of() {  # the --help of "$@" in a clean environment (defaults must not depend on the caller's)
    env -i PATH=/usr/bin:/bin LC_ALL=C "$@" --help
}

out=$(
    printf '%s\n\n' '# Flags of the fsdp.c tools'
    printf '%s\n' 'Generated from each tool'"'"'s `--help` by `scripts/gen-flags-doc.sh build/bin > docs/flags.md`: do not'
    printf '%s\n' 'edit it by hand. `tests/train/test_flags_doc.py` fails when it differs from what the built tools'
    printf '%s\n\n' 'print, and when README.md or docs/*.md name a flag that no tool has.'
    echo "$TOOLS" | while read -r tool sub; do
        [ -x "$bin/$tool" ] || { echo "gen-flags-doc.sh: $bin/$tool: not built" >&2; exit 1; }
        printf '## `%s`\n\n```text\n' "$tool${sub:+ $sub}"
        # shellcheck disable=SC2086
        help_of "$bin/$tool" $sub
        printf '```\n\n'
    done
    printf '%s\n\n' '## Environment variables'
    printf '%s\n\n' 'Every `FSDP_*` variable the library and the tools read (`src/core/tunables.h`; `fsdp-train --env` prints this table). A tool warns once about an `FSDP_*` variable that is not one of them.'
    env -i PATH=/usr/bin:/bin LC_ALL=C "$bin/fsdp-train" --env
)
printf '%s\n' "$out"
