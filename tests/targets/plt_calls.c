/* Test target: a hot loop of calls into libc through this executable's PLT, built without CFI for the PLT
 * (-Wl,--no-ld-generated-unwind-info, as LLD, rustc's linker, always builds), so that a sample in a stub
 * must be unwound by analysing the stub itself.
 *
 * main -> spin_calls -> rand_r@plt -> rand_r, forever. argv[1]: readiness fd.
 */
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned sink;

NOINLINE void spin_calls(void) {
    unsigned seed = 1;
    for (;;) sink += rand_r(&seed);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        int ready_fd = atoi(argv[1]);
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    spin_calls();
    return 0;
}
