// timer.h: monotonic wall-clock time.
#pragma once
double fsdp_now_sec(void);  // seconds since an arbitrary fixed point, monotonic
