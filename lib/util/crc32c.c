#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "util/crc32c.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;
static bool crc32c_hw;

/*
 * The crc32 instruction takes 3 cycles and can start one every cycle: a
 * single chain of them runs at a third of the unit's speed (about 8 GB/s),
 * slower than an NVMe array. So long buffers go as three lanes of LANE
 * bytes crc'd side by side, joined by the identity
 *     R(c, A||B) = Z(R(c, A)) ^ R(0, B),  |B| = LANE,
 * where R is the register update and Z the update over LANE zero bytes, a
 * linear map applied through four byte tables (lane_shift).
 */
#define LANE 4096
static uint32_t lane_shift[4][256];

/* The raw register after one zero byte (the table's step). */
static uint32_t zero_byte(uint32_t c)
{
    return crc32c_table[c & 0xff] ^ (c >> 8);
}

static uint32_t shift_lane(uint32_t c)
{
    return lane_shift[0][c & 0xff] ^ lane_shift[1][(c >> 8) & 0xff] ^
           lane_shift[2][(c >> 16) & 0xff] ^ lane_shift[3][c >> 24];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_HAVE_SSE42 1
__attribute__((target("sse4.2")))
static uint64_t chain(uint64_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint64_t w;

        memcpy(&w, p, sizeof(w));   /* any alignment, no strict-aliasing trap */
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return c;
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c = crc;

    for (; n >= 3 * LANE; p += 3 * LANE, n -= 3 * LANE) {
        uint64_t b = 0, d = 0;

        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t x, y, z;

            memcpy(&x, p + i, 8);
            memcpy(&y, p + LANE + i, 8);
            memcpy(&z, p + 2 * LANE + i, 8);
            c = __builtin_ia32_crc32di(c, x);
            b = __builtin_ia32_crc32di(b, y);
            d = __builtin_ia32_crc32di(d, z);
        }
        c = shift_lane(shift_lane((uint32_t)c) ^ (uint32_t)b) ^ (uint32_t)d;
    }
    return (uint32_t)chain(c, p, n);
}
#endif

static void crc32c_init(void)
{
    uint32_t basis[32];

    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[i] = c;
    }
    /* Z on each bit, then on each byte value at each of the 4 places. */
    for (int b = 0; b < 32; b++) {
        uint32_t c = (uint32_t)1 << b;

        for (int k = 0; k < LANE; k++)
            c = zero_byte(c);
        basis[b] = c;
    }
    for (int place = 0; place < 4; place++) {
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t z = 0;

            for (int b = 0; b < 8; b++)
                if (v >> b & 1)
                    z ^= basis[place * 8 + b];
            lane_shift[place][v] = z;
        }
    }
#ifdef CRC32C_HAVE_SSE42
    __builtin_cpu_init();
    crc32c_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t crc32c_sw(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t c = ~crc;

    pthread_once(&crc32c_once, crc32c_init);
    while (n--)
        c = crc32c_table[(c ^ *b++) & 0xff] ^ (c >> 8);
    return ~c;
}

uint32_t crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc32c_once, crc32c_init);
#ifdef CRC32C_HAVE_SSE42
    if (crc32c_hw)
        return ~crc32c_sse42(~crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}
