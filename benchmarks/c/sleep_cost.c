/* What one sleep between ticks costs the sleeping thread in CPU time, apart from any work.
 *
 * A sampler paced at 1 kHz sleeps ~1 ms between ticks; the wake-up (timer interrupt, switch back in, on a
 * VM the vCPU's exit from idle) is charged to its CPU time, and so is part of every "CPU per capture"
 * figure in bench_capture. This sleeps N times for 1 ms each way a sampler can: clock_nanosleep relative
 * and absolute (the C floor sampler) and sigtimedwait on a blocked SIGCHLD with a timeout (nprof's wait
 * between ticks, events.py), and prints the thread CPU time and the wall time per sleep.
 *
 * usage: sleep_cost [FIFO]   (FIFO=1: at SCHED_FIFO 10, as the samplers sleep)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SLEEPS 2000
#define PERIOD_NS 1000000L

static long now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void sleep_once(int how, const sigset_t *sigchld) {
    struct timespec period = {0, PERIOD_NS};
    if (how == 0) {
        clock_nanosleep(CLOCK_MONOTONIC, 0, &period, NULL);
    } else if (how == 1) {
        long due = now_ns(CLOCK_MONOTONIC) + PERIOD_NS;
        struct timespec at = {due / 1000000000L, due % 1000000000L};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
    } else {
        sigtimedwait(sigchld, NULL, &period);
    }
}

int main(int argc, char **argv) {
    int fifo = argc > 1 && atoi(argv[1]);
    if (fifo) {
        struct sched_param param = {.sched_priority = 10};
        if (sched_setscheduler(0, SCHED_FIFO, &param) != 0) {
            perror("sched_setscheduler");
            return 1;
        }
    }
    sigset_t sigchld;
    sigemptyset(&sigchld);
    sigaddset(&sigchld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &sigchld, NULL);
    static const char *names[] = {"clock_nanosleep, relative", "clock_nanosleep, absolute", "sigtimedwait"};
    for (int how = 0; how < 3; how++) {
        long cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID), wall0 = now_ns(CLOCK_MONOTONIC);
        for (int i = 0; i < SLEEPS; i++)
            sleep_once(how, &sigchld);
        long cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0, wall = now_ns(CLOCK_MONOTONIC) - wall0;
        printf("%-26s fifo=%d: CPU %.1f us, wall %.1f us per sleep\n", names[how], fifo, cpu / 1e3 / SLEEPS,
               wall / 1e3 / SLEEPS);
    }
    return 0;
}
