/* Test target for --subprocesses: a child process that shares its parent's address space, as a vfork
 * child does until its exec (here made with clone(CLONE_VM), so that it can stay in that state).
 *
 *   parent: main -> parent_spin
 *   child:  shared_spin, on a stack the parent allocated, until the parent is gone (PR_SET_PDEATHSIG)
 *
 * argv[1]: readiness fd, written once the child runs.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define CHILD_STACK (256 * 1024)

volatile unsigned long sink;
static volatile int child_running; /* one variable for both: the memory is shared */

NOINLINE static int shared_spin(void *arg) {
    (void)arg;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    child_running = 1;
    for (;;) sink++;
    return 0;
}

NOINLINE static void parent_spin(void) {
    for (;;) sink += 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int ready_fd = atoi(argv[1]);
    char *stack = malloc(CHILD_STACK);
    if (!stack || clone(shared_spin, stack + CHILD_STACK, CLONE_VM | SIGCHLD, NULL) < 0) return 1;
    while (!child_running) sched_yield();
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    parent_spin();
    return 0;
}
