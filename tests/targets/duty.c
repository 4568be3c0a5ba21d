/* Test target: one thread that computes in short bursts between sleeps, as paced loops do.
 *
 *   main -> cycle -> work (spins BUSY_US, in user code only)
 *                 -> rest -> clock_nanosleep for SLEEP_US, to an absolute CLOCK_MONOTONIC deadline
 *                            (what Python's time.sleep does since 3.11)
 *
 * argv[1]: readiness fd, written before the first cycle; argv[2], argv[3]: BUSY_US and SLEEP_US.
 * The thread spends a little less than BUSY_US / (BUSY_US + SLEEP_US) of its time in work(): each wake-up
 * adds its latency to the sleep. A sampler at normal priority on the same CPU is not run during the bursts
 * (the fair scheduler lets the thread finish them) and finds it in rest(): measured, 2 of 56 samples.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define NS 1000000000L

volatile unsigned long sink;

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the vDSO: no system call */
    return ts.tv_sec * NS + ts.tv_nsec;
}

NOINLINE void work(long busy_ns) {
    long end = now_ns() + busy_ns;
    while (now_ns() < end) sink++;
}

NOINLINE void rest(long sleep_ns) {
    long until_ns = now_ns() + sleep_ns;
    struct timespec ts = {until_ns / NS, until_ns % NS};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    sink++;
}

NOINLINE void cycle(long busy_ns, long sleep_ns) {
    for (;;) {
        work(busy_ns);
        rest(sleep_ns);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int ready_fd = atoi(argv[1]);
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    cycle(atol(argv[2]) * 1000L, atol(argv[3]) * 1000L);
    return 0;
}
