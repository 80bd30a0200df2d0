// guard_device.h: the guard backend ("guard"): the cpu backend for tests, with device memory that the
// host can reach only inside a call of the device layer (guard_memory.c). Its kernels and streams are
// the cpu backend's host ones, bracketed by its enter / leave.
#pragma once
#include "device/backend_impl.h"

extern const fsdp_backend_i fsdp_backend_guard;
