// path_canon.h: canonical absolute paths, also for paths that do not exist yet (an output about to be
// written), and whether one path lies inside another. The tools use them to refuse an output that
// would overwrite their own input however the two are spelled (symlinks, "..", "./", relative paths).
#pragma once
#include <stddef.h>

#include "core/status.h"

// The canonical absolute form of path into out (cap,): realpath(3) of its longest existing prefix
// (every symlink and ".." there resolved), then the components that do not exist yet, with "." and
// empty components dropped and ".." removing the component before it. "/" stays "/"; no other result
// ends in '/'. FSDP_ERR_INVALID_ARG for an empty path, FSDP_ERR_IO when the working directory cannot
// be resolved, FSDP_ERR_INVALID_ARG when the result does not fit in cap.
fsdp_status fsdp_path_canonical(const char *path, char *out, size_t cap);

// 1 when the canonical paths inner and outer are the same path or inner lies below outer, compared by
// whole components (/a/bc is not inside /a/b); else 0.
int fsdp_path_within(const char *inner, const char *outer);

// The directory part of the canonical path p into out (cap,): "/" for "/x" and for "/".
void fsdp_path_dirname(const char *p, char *out, size_t cap);
// The last component of the canonical path p ("" for "/"): a pointer into p.
const char *fsdp_path_basename(const char *p);
