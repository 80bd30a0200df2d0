// kernel_params.h: parameter lists of kernel_list.h's entries, (type, name) pairs, made into C:
//   FSDP_KPARAMS((int, M), (const float *, A))  ->  int M, const float *A     (a declaration's)
//   FSDP_KARGS((int, M), (const float *, A))    ->  M, A                      (a call's, in order)
// Up to 16 parameters (FSDP_KNARGS counts them).
#pragma once

#define FSDP_KNARGS(...) FSDP_KNARGS_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define FSDP_KNARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, n, ...) n
#define FSDP_KCAT(a, b) FSDP_KCAT_(a, b)
#define FSDP_KCAT_(a, b) a##b

#define FSDP_KPARAM(pair) FSDP_KPARAM_ pair
#define FSDP_KPARAM_(type, name) type name
#define FSDP_KARG(pair) FSDP_KARG_ pair
#define FSDP_KARG_(type, name) name

// FSDP_KMAP(f, pairs...): f(pair1), f(pair2), ...
#define FSDP_KMAP(f, ...) FSDP_KCAT(FSDP_KMAP, FSDP_KNARGS(__VA_ARGS__))(f, __VA_ARGS__)
#define FSDP_KMAP1(f, a) f(a)
#define FSDP_KMAP2(f, a, ...) f(a), FSDP_KMAP1(f, __VA_ARGS__)
#define FSDP_KMAP3(f, a, ...) f(a), FSDP_KMAP2(f, __VA_ARGS__)
#define FSDP_KMAP4(f, a, ...) f(a), FSDP_KMAP3(f, __VA_ARGS__)
#define FSDP_KMAP5(f, a, ...) f(a), FSDP_KMAP4(f, __VA_ARGS__)
#define FSDP_KMAP6(f, a, ...) f(a), FSDP_KMAP5(f, __VA_ARGS__)
#define FSDP_KMAP7(f, a, ...) f(a), FSDP_KMAP6(f, __VA_ARGS__)
#define FSDP_KMAP8(f, a, ...) f(a), FSDP_KMAP7(f, __VA_ARGS__)
#define FSDP_KMAP9(f, a, ...) f(a), FSDP_KMAP8(f, __VA_ARGS__)
#define FSDP_KMAP10(f, a, ...) f(a), FSDP_KMAP9(f, __VA_ARGS__)
#define FSDP_KMAP11(f, a, ...) f(a), FSDP_KMAP10(f, __VA_ARGS__)
#define FSDP_KMAP12(f, a, ...) f(a), FSDP_KMAP11(f, __VA_ARGS__)
#define FSDP_KMAP13(f, a, ...) f(a), FSDP_KMAP12(f, __VA_ARGS__)
#define FSDP_KMAP14(f, a, ...) f(a), FSDP_KMAP13(f, __VA_ARGS__)
#define FSDP_KMAP15(f, a, ...) f(a), FSDP_KMAP14(f, __VA_ARGS__)
#define FSDP_KMAP16(f, a, ...) f(a), FSDP_KMAP15(f, __VA_ARGS__)

#define FSDP_KPARAMS(...) FSDP_KMAP(FSDP_KPARAM, __VA_ARGS__)
#define FSDP_KARGS(...) FSDP_KMAP(FSDP_KARG, __VA_ARGS__)
