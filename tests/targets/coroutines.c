/* Test target: two coroutines on heap stacks (makecontext/swapcontext), entered from main.
 *
 *   main -> sched_work                      (first, for long: the thread's first samples are on its stack)
 *   __start_context -> co_body -> co_leaf   (each coroutine, on its own stack; makecontext makes co_body
 *                                            return into __start_context, whose CFI ends the walk)
 *
 * argv[1]: readiness fd, written before main's first long stretch. Runs until killed.
 */
#include <stdlib.h>
#include <ucontext.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define COROUTINE_STACK (256 * 1024)

static ucontext_t main_context, coroutine[2];
volatile long sink;

NOINLINE void co_leaf(int id) {
    for (int i = 0; i < 200000; i++) sink += (long)i * id;
}

NOINLINE void co_body(int id) {
    for (;;) {
        co_leaf(id);
        swapcontext(&coroutine[id], &main_context);
    }
}

NOINLINE void sched_work(long n) {
    for (long i = 0; i < n; i++) sink += i;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    for (int i = 0; i < 2; i++) {
        getcontext(&coroutine[i]);
        coroutine[i].uc_stack.ss_sp = malloc(COROUTINE_STACK);
        coroutine[i].uc_stack.ss_size = COROUTINE_STACK;
        coroutine[i].uc_link = NULL;
        makecontext(&coroutine[i], (void (*)(void))co_body, 1, i);
    }
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    sched_work(300000000L);
    for (int k = 0;; k++) {
        sched_work(10000);
        swapcontext(&main_context, &coroutine[k & 1]);
    }
}
