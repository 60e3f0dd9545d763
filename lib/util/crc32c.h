/* crc32c (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI
 * and ext4: a table implementation, and the SSE4.2 instruction where the
 * CPU has it. */
#ifndef UMP_CRC32C_H
#define UMP_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over n bytes of p; picks the fastest path. */
uint32_t crc32c(uint32_t crc, const void *p, size_t n);
/* The same with the portable table only (for tests that compare paths). */
uint32_t crc32c_sw(uint32_t crc, const void *p, size_t n);

#endif
