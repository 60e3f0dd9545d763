#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "crc32c.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;
static bool crc32c_hw;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_HAVE_SSE42 1
__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c = crc;

    while (n >= 8) {
        uint64_t w;

        memcpy(&w, p, sizeof(w));   /* any alignment, no strict-aliasing trap */
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[i] = c;
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
