/*
 * The address window pools are reserved in first (see va_window.h).
 *
 * Why a window: the processes of a shared pool (ump_pool_attach) and a
 * checkpoint restored in a fresh process (ump_pool_restore) need the
 * pool's range free in a process other than the one that chose it. The
 * kernel puts a process's libraries, heap and stacks near the program and
 * under the top of the address space, moved by ASLR from process to
 * process (28 bits of pages: up to 1 TiB), so a range the kernel or the
 * driver chose in one process is often taken in the next. The window
 * starts at 32 TiB, far from both and above ASan's shadow (TSan's: see
 * below); where it is not the process's to use (another sanitizer's
 * shadow, a smaller address space) the reservation fails there and the
 * caller lets the kernel or the driver choose, as without a window.
 */
#include "config.h"

#include <sys/random.h>
#include <unistd.h>

#include "backend/va_window.h"
#include "util/internal.h"

/* ThreadSanitizer's shadow lies at 32 TiB, and its mmap aborts the
 * process on a fixed address outside the application's ranges: under it
 * the window is the top 128 GiB of its "mid" application range (x86-64,
 * 48-bit: 0x5500... to 0x5680...), above where the kernel puts a PIE
 * program and its heap (0x5555... plus at most 1 TiB of randomization
 * with the default 28 bits). */
#if defined(__SANITIZE_THREAD__)
#define VA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VA_TSAN 1
#endif
#endif
/* The first candidate is drawn at random among VA_SLOTS slots, so that a
 * process that holds a pool already seldom holds the range a pool of
 * another process needs; the next ones follow it, one span apart. */
#ifdef VA_TSAN
#define VA_WINDOW ((uintptr_t)0x566000000000)
#define VA_WINDOW_END ((uintptr_t)0x568000000000) /* 128 GiB */
#define VA_SLOT ((uintptr_t)1 << 32)
#else
#define VA_WINDOW ((uintptr_t)32 << 40)
#define VA_WINDOW_END UINTPTR_MAX
#define VA_SLOT ((uintptr_t)1 << 40)
#endif
#define VA_SLOTS 32
/* A guard of free addresses on each side, so that reservations never
 * touch: an overrun faults instead of landing in another pool. */
#define VA_GUARD ((uintptr_t)1 << 30)

void va_window_start(struct va_window *w, size_t size, size_t al,
                     unsigned tries)
{
    uintptr_t first = 0;

    if (getrandom(&first, sizeof(first), GRND_NONBLOCK) != sizeof(first))
        first = (uintptr_t)getpid() * 2654435761u;
    first = (first % VA_SLOTS) * VA_SLOT;
    w->al = al;
    w->guard = UMP_ALIGN_UP(VA_GUARD, (uintptr_t)al);
    w->span = UMP_ALIGN_UP((uintptr_t)size, (uintptr_t)al) + 2 * w->guard;
    w->at = UMP_ALIGN_UP(VA_WINDOW + first, (uintptr_t)al);
    w->left = w->span < size ? 0 : tries; /* size near SIZE_MAX: none */
    w->wrapped = false;
}

bool va_window_next(struct va_window *w, uintptr_t *at_p)
{
    if (!w->left)
        return false;
    uintptr_t at = w->at;
    if (at + w->span < at || at + w->span > VA_WINDOW_END) {
        /* Past the window's end (or the address space's): once more from
         * its start. */
        if (w->wrapped)
            return false;
        w->wrapped = true;
        at = UMP_ALIGN_UP(VA_WINDOW, w->al);
        if (at + w->span < at || at + w->span > VA_WINDOW_END)
            return false;
    }
    w->left--;
    w->at = at + w->span;
    *at_p = at;
    return true;
}
