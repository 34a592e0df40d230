/* Preloaded before libfaketime in .ci/shifted-clock's runs. Python (3.11 and later)
 * sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ...): Debian 12's
 * libfaketime 0.9.10 moves that deadline by the realtime offset even when told to
 * leave the monotonic clock alone (FAKETIME_DONT_FAKE_MONOTONIC=1), and the kernel
 * answers EINVAL. The monotonic clock is not moved in those runs, so its sleeps go to
 * the kernel as asked; every other clock's go on to libfaketime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *request,
                    struct timespec *remain) {
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (clock == CLOCK_MONOTONIC) {
        /* the raw call answers -1 and sets errno; clock_nanosleep returns the error */
        return syscall(SYS_clock_nanosleep, clock, flags, request, remain) ? errno : 0;
    }
    if (!next) {
        next = dlsym(RTLD_NEXT, "clock_nanosleep");
    }
    return next(clock, flags, request, remain);
}
