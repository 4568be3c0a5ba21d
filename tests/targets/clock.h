/* Seconds on the monotonic clock, for test targets that run or spin for a given time. */
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the vDSO: a sample never finds a target in a system call here */
    return ts.tv_sec + ts.tv_nsec / 1e9;
}
