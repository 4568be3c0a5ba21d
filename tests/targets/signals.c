/* Test target: receives a SIGALRM every millisecond and counts them, while spinning.
 *
 * It checks that nprof forwards every signal a traced thread receives: on SIGUSR1 it writes how many
 * SIGALRMs arrived and how many interval-timer periods elapsed (the two must stay close), then exits.
 * argv[1]: readiness fd; the report goes to stdout.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile sig_atomic_t alarms, report;
volatile unsigned long sink;

static void on_alarm(int sig) { (void)sig; alarms++; }
static void on_usr1(int sig) { (void)sig; report = 1; }

NOINLINE void spin(void) {
    for (unsigned long i = 0; i < 100000; i++) sink += i;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    double start = now();
    setitimer(ITIMER_REAL, &it, NULL);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    while (!report) spin();
    double elapsed = now() - start;
    printf("alarms %d periods %.0f\n", (int)alarms, elapsed / 0.001);
    return 0;
}
