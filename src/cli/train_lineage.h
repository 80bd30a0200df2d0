// train_lineage.h: which run a --ckpt-dir belongs to. One job at a time writes into it (a lock), and
// its step_* checkpoints form one history (a lineage): fresh runs into a used directory, and resumes
// that would mix histories, are refused or archive what they supersede, never delete it.
#pragma once
#include "cli/train_ckpt.h"
#include "comm/comm.h"

// Before anything is built (collective; rank 0 acts, every rank returns the same): creates --ckpt-dir
// when missing (its parent must exist), locks it for the run's lifetime (a second job on it is refused,
// naming the holder), finishes what a killed job left (an archiving, rotation leftovers), and decides
// the run's lineage. A run continues the lineage of the checkpoint it resumes and keeps its run id; a
// fresh run gets a new one. A directory whose complete checkpoints belong to another history is
// refused: a fresh run (no --resume, or --resume auto finding nothing) into a directory holding
// complete checkpoints, or a --resume of a checkpoint outside the directory whose run, or step, does
// not continue the newest one in it; the line names the newest checkpoint and the ways out (--resume
// auto, --new-run, another --ckpt-dir). A resume of an older checkpoint of the directory itself starts
// a branch: the newer entries are archived (cli_ckpt_resume, once the checkpoint has loaded) and
// --resume auto then follows the branch. --new-run archives every entry. `writes` 0 (--eval-only, or
// no --ckpt-dir): nothing is done. Returns 0, or 2 after rank 0 printed one line "PROG: ...".
int cli_ckpt_open(const char *prog, cli_ckpt_options *o, int writes, fsdp_comm *world);
// At the end of the run, on every path: removes a --ckpt-dir that cli_ckpt_open created when the run
// saved nothing into it (--steps 0, a run that failed before its first save), then releases the lock.
void cli_ckpt_close(cli_ckpt_options *o);
