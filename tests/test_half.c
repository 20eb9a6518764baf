/* fp16/bf16 conversions against values known exactly. */
#include "check.h"
#include "fathom.h"

#include <stdint.h>
#include <string.h>

int main(void) {
    CHECK(fathom_f32_to_f16(0.0f) == 0x0000);
    CHECK(fathom_f32_to_f16(-0.0f) == 0x8000);
    CHECK(fathom_f32_to_f16(1.0f) == 0x3c00);
    CHECK(fathom_f32_to_f16(0.5f) == 0x3800);
    CHECK(fathom_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(fathom_f32_to_f16(65520.0f) == 0x7c00); /* rounds to inf */
    CHECK(fathom_f32_to_f16(1.0f + 1.0f / 2048.0f) == 0x3c00); /* tie to even */
    CHECK(fathom_f32_to_f16(1.0f + 3.0f / 2048.0f) == 0x3c02); /* tie to even, up */
    CHECK(fathom_f32_to_f16(5.9604644775390625e-8f) == 0x0001); /* smallest subnormal */
    CHECK(fathom_f32_to_f16(2.98023223876953125e-8f) == 0x0000); /* half of it: tie to even 0 */
    CHECK(fathom_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(fathom_f16_to_f32(0x0001) == 5.9604644775390625e-8f);
    CHECK(fathom_f16_to_f32(0xfbff) == -65504.0f);
    /* every finite half round-trips */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        if (fathom_f32_to_f16(fathom_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0);
    CHECK(fathom_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(fathom_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(fathom_f32_to_bf16(1.00390625f) == 0x3f80);  /* tie to even */
    CHECK(fathom_f32_to_bf16(1.01171875f) == 0x3f82);  /* tie to even, up */
    return check_summary("test_half");
}
