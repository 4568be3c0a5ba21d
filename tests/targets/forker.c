/* Test target for --subprocesses: a parent with children in distinct call chains.
 *
 *   parent:                 main -> parent_work -> spin
 *   child A (fork, no exec): main -> child_a_work -> spin         (forked before readiness)
 *   child B (fork + exec):   argv[2] run as a program with args "-1" (forked on SIGUSR1, during recording)
 *
 * Children die with the parent (PR_SET_PDEATHSIG), so killing the parent cleans everything up.
 * argv[1]: readiness fd; argv[2]: the program child B execs.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;
static volatile sig_atomic_t fork_b;

NOINLINE void spin(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i;
}
NOINLINE void parent_work(void) { spin(100000); sink++; }
NOINLINE void child_a_work(void) { spin(100000); sink++; }

static void on_usr1(int sig) { (void)sig; fork_b = 1; }

static pid_t child(void) {
    pid_t pid = fork();
    if (pid == 0) prctl(PR_SET_PDEATHSIG, SIGKILL);
    return pid;
}

int main(int argc, char **argv) {
    int ready_fd = atoi(argv[1]);
    signal(SIGUSR1, on_usr1);
    if (child() == 0) {
        close(ready_fd);
        for (;;) child_a_work();
    }
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    for (;;) {
        if (fork_b) {
            fork_b = 0;
            if (child() == 0) {
                execl(argv[2], argv[2], "-1", (char *)NULL);
                _exit(127);
            }
        }
        parent_work();
    }
}
