/* cpu — cpuid detection for the one run-time dispatch (see cpu.h). */
#include "cpu.h"

#include <stdatomic.h>
#include <stdlib.h>

#ifdef FATHOM_X86
#include <cpuid.h>

static unsigned cpu_detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx || __get_cpuid_max(0, NULL) < 7) return 0;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 0x6u) != 0x6u) return 0; /* XMM and YMM state */
    __cpuid_count(7, 0, a, b, c, d);
    unsigned flags = 0;
    if ((b >> 8) & 1) flags |= FATHOM_CPU_BMI2;
    if (((b >> 5) & 1) && fma && f16c) flags |= FATHOM_CPU_AVX2;
    if ((c >> 8) & 1) flags |= FATHOM_CPU_GFNI;
    if ((c >> 10) & 1) flags |= FATHOM_CPU_VPCLMULQDQ;
    /* AVX-512F, and opmask + ZMM state saved by the OS */
    if ((flags & FATHOM_CPU_AVX2) && ((b >> 16) & 1) && (xcr0_lo & 0xe0u) == 0xe0u) {
        flags |= FATHOM_CPU_AVX512;
        if ((b >> 30) & 1) flags |= FATHOM_CPU_AVX512BW;
        if ((c >> 11) & 1) flags |= FATHOM_CPU_AVX512VNNI;
        if ((c >> 1) & 1) flags |= FATHOM_CPU_AVX512VBMI;
        if ((b >> 31) & 1) flags |= FATHOM_CPU_AVX512VL;
    }
    return flags;
}
#else
static unsigned cpu_detect(void) { return 0; }
#endif

unsigned fathom_cpu_features(void) {
    /* bit 31 marks "detected"; racing threads store the same value */
    static atomic_uint cached;
    unsigned flags = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!flags) {
        flags = cpu_detect();
        const char *mask = getenv("FATHOM_CPU_MASK");
        if (mask && *mask) flags &= (unsigned)strtoul(mask, NULL, 10);
        flags |= 1u << 31;
        atomic_store_explicit(&cached, flags, memory_order_relaxed);
    }
    return flags & ~(1u << 31);
}

bool fathom_cpu_is_amd(void) {
#ifdef FATHOM_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "Auth" "enti" "cAMD" */
#else
    return false;
#endif
}
