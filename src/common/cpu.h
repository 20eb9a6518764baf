/* cpu — the one run-time CPU-feature dispatch of the library.
 *
 * fathom_cpu_features() reads cpuid once (with the OS's xgetbv check that it
 * saves the wider registers) and caches the result. Kernels compiled for an
 * instruction set carry a per-function target attribute (FATHOM_TARGET_*),
 * so the library builds and runs without -march flags; a caller picks the
 * variant with fathom_cpu_has(). FATHOM_CPU_DISPATCH generates the generic,
 * AVX2 and AVX-512F compilations of one plain-C body and the function that
 * chooses between them (the habit of zstd's lib/common/cpu.h and ggml's
 * *_generic + arch/x86 variants). */
#ifndef FATHOM_CPU_H
#define FATHOM_CPU_H

#include <stdbool.h>

enum {
    FATHOM_CPU_AVX2 = 1u << 0,       /* AVX2 + FMA + F16C, YMM state saved */
    FATHOM_CPU_AVX512 = 1u << 1,     /* AVX-512F (and AVX2), opmask + ZMM state saved */
    FATHOM_CPU_AVX512BW = 1u << 2,   /* AVX-512BW */
    FATHOM_CPU_AVX512VNNI = 1u << 3, /* AVX-512 VNNI */
    FATHOM_CPU_GFNI = 1u << 4,       /* GFNI */
    FATHOM_CPU_BMI2 = 1u << 5,       /* BMI2 */
    FATHOM_CPU_AVX512VBMI = 1u << 6, /* AVX-512 VBMI */
    FATHOM_CPU_VPCLMULQDQ = 1u << 7, /* VPCLMULQDQ */
    FATHOM_CPU_AVX512VL = 1u << 8    /* AVX-512 VL */
};

/* What FATHOM_TARGET_AVX512_TABLES code needs: AVX-512 F, BW, VL and VBMI,
 * GFNI and VPCLMULQDQ (Ice Lake and later, Zen 4 and later). */
#define FATHOM_CPU_AVX512_TABLES                                                                   \
    (FATHOM_CPU_AVX512 | FATHOM_CPU_AVX512BW | FATHOM_CPU_AVX512VL | FATHOM_CPU_AVX512VBMI |       \
     FATHOM_CPU_GFNI | FATHOM_CPU_VPCLMULQDQ)

/* What FATHOM_TARGET_AVX512_INT8 code needs: the tables' features and
 * AVX-512 VNNI (Ice Lake and later, Zen 4 and later). */
#define FATHOM_CPU_AVX512_INT8 (FATHOM_CPU_AVX512_TABLES | FATHOM_CPU_AVX512VNNI)

/* The FATHOM_CPU_* bits this CPU and OS support; 0 off x86-64. Setting the
 * environment variable FATHOM_CPU_MASK to a decimal number ANDs the result
 * with it (tests and benchmarks use it to run the narrower variants). */
unsigned fathom_cpu_features(void);

/* Whether the CPU is AMD's (cpuid vendor "AuthenticAMD"): for choices
 * between equivalent kernels whose speeds differ by vendor. */
bool fathom_cpu_is_amd(void);

static inline bool fathom_cpu_has(unsigned features) {
    return (fathom_cpu_features() & features) == features;
}

#if defined(__GNUC__) && defined(__x86_64__)
#define FATHOM_X86 1
#define FATHOM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FATHOM_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define FATHOM_TARGET_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define FATHOM_TARGET_AVX512_TABLES                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,gfni,vpclmulqdq,avx2,fma,f16c")))
#define FATHOM_TARGET_AVX512_INT8                                                                  \
    __attribute__((target(                                                                         \
        "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,gfni,vpclmulqdq,avx2,fma,f16c")))
#endif

#if defined(__GNUC__)
#define FATHOM_INLINE static inline __attribute__((always_inline))
#else
#define FATHOM_INLINE static inline
#endif

/* FATHOM_CPU_DISPATCH(ret, name, params, args): given an FATHOM_INLINE
 * function name##_body, defines `static ret name params` that runs the body
 * compiled for AVX-512F, AVX2 or the baseline, whichever this CPU runs.
 * Plain C only: with floating-point contraction off (ISO C mode) every
 * variant computes the same values. Use FATHOM_CPU_DISPATCH_VOID for void. */
#ifdef FATHOM_X86
#define FATHOM_CPU_DISPATCH_(ret, RETURN, name, params, args)                                      \
    FATHOM_TARGET_AVX512 static ret name##_avx512 params { RETURN name##_body args; }              \
    FATHOM_TARGET_AVX2 static ret name##_avx2 params { RETURN name##_body args; }                  \
    static ret name##_generic params { RETURN name##_body args; }                                  \
    static ret name params {                                                                       \
        RETURN(fathom_cpu_has(FATHOM_CPU_AVX512) ? name##_avx512                                   \
               : fathom_cpu_has(FATHOM_CPU_AVX2) ? name##_avx2                                     \
                                                 : name##_generic) args;                           \
    }
#else
#define FATHOM_CPU_DISPATCH_(ret, RETURN, name, params, args)                                      \
    static ret name params { RETURN name##_body args; }
#endif
#define FATHOM_CPU_DISPATCH(ret, name, params, args) FATHOM_CPU_DISPATCH_(ret, return, name, params, args)
#define FATHOM_CPU_DISPATCH_VOID(name, params, args) FATHOM_CPU_DISPATCH_(void, , name, params, args)

#endif /* FATHOM_CPU_H */
