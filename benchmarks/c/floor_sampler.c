/* The floor: a minimal C sampler making the same system calls per sample as nprof's capture loop.
 *
 * Per tick: list /proc/PID/task (seizing new threads); per thread: pread schedstat, and if its run time
 * grew or it was switched onto a CPU since its last sample, pread stat (nprof's idle checks: a thread whose
 * run time did not grow is stopped only if it was switched in since and is running, state R); then
 * PTRACE_INTERRUPT every thread that ran, and as each reports its stop
 * (waitpid(-1, __WALL)): PTRACE_GETREGS, one process_vm_readv of the stack window into a preallocated
 * buffer, PTRACE_CONT; then one waitpid(WNOHANG) for events between ticks (exits, signals to pass on, as
 * nprof answers them too). Ticks are paced with nanosleep, at SCHED_FIFO 10 when permitted, as nprof sleeps
 * (profiler/sampling/priority.py: a sampler at normal priority on a busy thread's CPU is not run when its
 * timer fires): one call at the start, where nprof switches twice per tick to keep its work after the stops
 * at normal priority. Prints JSON: stops ("captures"), ticks, sampler CPU
 * time and wall time of the sampling loop. It ends after SECONDS or when the target exits, whichever comes
 * first, so it can also stand in as the floor of a whole recording (bench_python.py).
 *
 * usage: floor_sampler PID RATE SECONDS STACK_BYTES
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256
#define MAX_HELD 1000000

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static pid_t tids[MAX_THREADS];
static int sched_fd[MAX_THREADS], stat_fd[MAX_THREADS], n = 0;
static long last_run[MAX_THREADS], last_slices[MAX_THREADS];

/* Seize the threads in /proc/PID/task that are not seized yet (all of them on the first call). */
static void seize_new(pid_t pid) {
    char path[256];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < MAX_THREADS) {
        if (e->d_name[0] == '.') continue;
        pid_t tid = atoi(e->d_name);
        int known = 0;
        for (int i = 0; i < n && !known; i++) known = tids[i] == tid;
        if (known || ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) continue;
        snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", pid, tid);
        sched_fd[n] = open(path, O_RDONLY);
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
        stat_fd[n] = open(path, O_RDONLY);
        last_run[n] = -1;
        last_slices[n] = -1;
        tids[n++] = tid;
    }
    if (d) closedir(d);
}

/* A thread reported its exit: stop looking at it. */
static void forget(pid_t tid) {
    for (int i = 0; i < n; i++)
        if (tids[i] == tid && sched_fd[i] >= 0) {
            close(sched_fd[i]);
            sched_fd[i] = -1;
        }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s PID RATE SECONDS STACK_BYTES\n", argv[0]);
        return 2;
    }
    pid_t pid = atoi(argv[1]);
    double rate = atof(argv[2]), seconds = atof(argv[3]);
    size_t stack_bytes = strtoul(argv[4], NULL, 10);
    char buf[512];
    seize_new(pid);
    struct sched_param fifo = {.sched_priority = 10};
    int realtime = sched_setscheduler(0, SCHED_FIFO, &fifo) == 0; /* else: normal priority, as nprof falls back */
    char *window = malloc(stack_bytes * MAX_THREADS);
    double *held = malloc(sizeof(double) * MAX_HELD);
    struct user_regs_struct regs;
    long samples = 0, ticks = 0;
    double start = now(), cpu0 = cpu_seconds(), next = start;
    int gone = 0; /* the target exited: end the loop, still report */
    while (!gone && now() - start < seconds) {
        seize_new(pid); /* threads that appeared are sampled from their start, as nprof does */
        int due = 0, alive = 0;
        for (int i = 0; i < n; i++) {
            if (sched_fd[i] < 0) continue;
            ssize_t len = pread(sched_fd[i], buf, sizeof buf - 1, 0);
            if (len <= 0) { /* this thread exited (ESRCH): stop looking at it */
                close(sched_fd[i]);
                sched_fd[i] = -1;
                continue;
            }
            alive++;
            buf[len] = 0;
            long run = 0, wait = 0, slices = 0;
            sscanf(buf, "%ld %ld %ld", &run, &wait, &slices);
            int same = last_run[i] >= 0 && run - last_run[i] <= 100000;
            if (same && slices == last_slices[i]) continue; /* not on a CPU since: same stack, not stopped */
            len = pread(stat_fd[i], buf, sizeof buf - 1, 0);
            if (len < 0) continue;
            buf[len] = 0;
            char *state = strrchr(buf, ')');
            if (same && !(state && state[1] == ' ' && state[2] == 'R')) { /* ran a little, sleeps now */
                last_slices[i] = slices;
                continue;
            }
            last_run[i] = run;
            last_slices[i] = slices;
            if (ptrace(PTRACE_INTERRUPT, tids[i], 0, 0) == 0) due++;
        }
        if (!alive) break;
        for (int k = 0; k < due; k++) {
            int status;
            pid_t tid = waitpid(-1, &status, __WALL);
            if (tid < 0) { gone = 1; break; } /* ECHILD: no tracee left */
            if (!WIFSTOPPED(status)) { /* it exited instead of stopping */
                forget(tid);
                continue;
            }
            double seen = now();
            ptrace(PTRACE_GETREGS, tid, 0, &regs);
            struct iovec local = {window + (size_t)k * stack_bytes, stack_bytes};
            struct iovec remote = {(void *)regs.rsp, stack_bytes};
            process_vm_readv(pid, &local, 1, &remote, 1, 0);
            ptrace(PTRACE_CONT, tid, 0, 0);
            if (samples < MAX_HELD) held[samples] = now() - seen;
            samples++;
        }
        int status;
        pid_t tid;
        while ((tid = waitpid(-1, &status, __WALL | WNOHANG)) > 0) { /* events between ticks */
            if (!WIFSTOPPED(status))
                forget(tid); /* the exit of a thread that was not due */
            else /* a signal-delivery-stop: pass the signal on */
                ptrace(PTRACE_CONT, tid, 0, status >> 16 ? 0 : WSTOPSIG(status));
        }
        if (tid < 0) gone = 1; /* ECHILD: no tracee left */
        ticks++;
        next += 1.0 / rate;
        double wait = next - now();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
        } else {
            next = now();
        }
    }
    double wall = now() - start, cpu = cpu_seconds() - cpu0;
    for (int i = 0; i < n; i++) ptrace(PTRACE_INTERRUPT, tids[i], 0, 0);
    for (int i = 0; i < n; i++) {
        int status;
        pid_t tid = waitpid(-1, &status, __WALL);
        if (tid > 0) ptrace(PTRACE_DETACH, tid, 0, 0);
    }
    long kept = samples < MAX_HELD ? samples : MAX_HELD;
    qsort(held, kept, sizeof(double), cmp_double);
    printf("{\"captures\": %ld, \"ticks\": %ld, \"cpu_s\": %.6f, \"wall_s\": %.6f, \"held_median_us\": %.2f, "
           "\"held_p90_us\": %.2f, \"realtime\": %s}\n",
           samples, ticks, cpu, wall, kept ? held[kept / 2] * 1e6 : 0, kept ? held[(long)(kept * 0.9)] * 1e6 : 0,
           realtime ? "true" : "false");
    return 0;
}
