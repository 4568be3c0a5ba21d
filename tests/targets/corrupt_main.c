/* Test target: main -> call_library -> lib_entry -> lib_middle -> lib_leaf, with the library loaded
 * from the path in argv[2] (dlopen), so the test can substitute a copy with a corrupted .eh_frame.
 * argv[1]: readiness fd. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void call_library(void (*entry)(void)) {
    entry();
    sink++;
}

int main(int argc, char **argv) {
    int ready_fd = atoi(argv[1]);
    void *lib = dlopen(argv[2], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    void (*entry)(void) = (void (*)(void))dlsym(lib, "lib_entry");
    call_library(entry);
    if (write(ready_fd, "ready\n", 6) != 6) return 1;
    close(ready_fd);
    for (;;) call_library(entry);
}
