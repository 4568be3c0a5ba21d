/* The floor: a minimal C sampler making the same system calls per sample as nprof's capture loop.
 *
 * Per tick: list /proc/PID/task; per thread: pread schedstat, and if its run time grew, pread stat (nprof's
 * idle checks); then PTRACE_INTERRUPT every thread that ran, and as each reports its stop
 * (waitpid(-1, __WALL)): PTRACE_GETREGS, one process_vm_readv of the stack window into a preallocated
 * buffer, PTRACE_CONT. Ticks are paced with nanosleep. Prints JSON: stops ("captures"), ticks, sampler CPU
 * time and wall time of the sampling loop.
 *
 * usage: floor_sampler PID RATE SECONDS STACK_BYTES
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s PID RATE SECONDS STACK_BYTES\n", argv[0]);
        return 2;
    }
    pid_t pid = atoi(argv[1]);
    double rate = atof(argv[2]), seconds = atof(argv[3]);
    size_t stack_bytes = strtoul(argv[4], NULL, 10);
    char path[256], buf[512];
    pid_t tids[MAX_THREADS];
    int sched_fd[MAX_THREADS], stat_fd[MAX_THREADS], n = 0;
    long last_run[MAX_THREADS];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < MAX_THREADS) {
        if (e->d_name[0] == '.') continue;
        pid_t tid = atoi(e->d_name);
        if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) continue;
        snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", pid, tid);
        sched_fd[n] = open(path, O_RDONLY);
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
        stat_fd[n] = open(path, O_RDONLY);
        last_run[n] = -1;
        tids[n++] = tid;
    }
    char *window = malloc(stack_bytes * MAX_THREADS);
    double *held = malloc(sizeof(double) * MAX_HELD);
    struct user_regs_struct regs;
    long samples = 0, ticks = 0;
    double start = now(), cpu0 = cpu_seconds(), next = start;
    while (now() - start < seconds) {
        snprintf(path, sizeof path, "/proc/%d/task", pid);
        DIR *t = opendir(path);
        while (t && readdir(t)) {
        }
        if (t) closedir(t);
        int due = 0;
        for (int i = 0; i < n; i++) {
            ssize_t len = pread(sched_fd[i], buf, sizeof buf - 1, 0);
            if (len <= 0) return 1;
            buf[len] = 0;
            long run = atol(buf);
            if (last_run[i] >= 0 && run - last_run[i] <= 100000) continue; /* idle: not stopped */
            last_run[i] = run;
            if (pread(stat_fd[i], buf, sizeof buf, 0) < 0) return 1;
            ptrace(PTRACE_INTERRUPT, tids[i], 0, 0);
            due++;
        }
        for (int k = 0; k < due; k++) {
            int status;
            pid_t tid = waitpid(-1, &status, __WALL);
            if (tid < 0) return 1;
            double seen = now();
            ptrace(PTRACE_GETREGS, tid, 0, &regs);
            struct iovec local = {window + (size_t)k * stack_bytes, stack_bytes};
            struct iovec remote = {(void *)regs.rsp, stack_bytes};
            process_vm_readv(pid, &local, 1, &remote, 1, 0);
            ptrace(PTRACE_CONT, tid, 0, 0);
            if (samples < MAX_HELD) held[samples] = now() - seen;
            samples++;
        }
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
           "\"held_p90_us\": %.2f}\n",
           samples, ticks, cpu, wall, kept ? held[kept / 2] * 1e6 : 0, kept ? held[(long)(kept * 0.9)] * 1e6 : 0);
    return 0;
}
