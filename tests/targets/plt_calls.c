/* Test target: a thread parked in a PLT stub of this executable, built without CFI for the PLT
 * (-Wl,--no-ld-generated-unwind-info, as LLD, rustc's linker, always builds), so that every sample is in a
 * stub and must be unwound by analysing the stub itself.
 *
 * Sampled in a loop of real calls, the stub held 0.3-9% of the samples by machine, and none of 4000 on
 * CI's: the instruction an interrupt lands on is the CPU's choice. So the stub's GOT slot is pointed at the
 * stub itself: its `jmp *slot(%rip)` jumps to itself for ever, with the stack as at the call (the return
 * address into spin_calls at [rsp]). Built -fno-pie -no-pie, where rand_r's address is its canonical PLT
 * entry in this executable; the slot is the operand of the stub's jmp.
 *
 * main -> spin_calls -> rand_r@plt, parked. argv[1]: readiness fd.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned sink;

/* The GOT slot a PLT stub jumps through: `[endbr64] [bnd] jmp *disp32(%rip)`; NULL for another stub. */
static void **stub_slot(unsigned char *code) {
    if (memcmp(code, "\xf3\x0f\x1e\xfa", 4) == 0) code += 4; /* endbr64 (an IBT PLT) */
    if (code[0] == 0xf2) code += 1;                          /* bnd (an MPX PLT) */
    if (code[0] != 0xff || code[1] != 0x25) return NULL;
    int32_t disp;
    memcpy(&disp, code + 2, sizeof disp);
    return (void **)(code + 6 + disp);
}

NOINLINE void spin_calls(void) {
    unsigned seed = 1;
    for (;;) sink += rand_r(&seed);
}

int main(int argc, char **argv) {
    void *stub = (void *)rand_r; /* -no-pie: the canonical PLT entry */
    void **slot = stub_slot(stub);
    if (slot == NULL) {
        fprintf(stderr, "plt_calls: rand_r at %p is not a PLT stub (built with -no-pie?)\n", stub);
        return 1;
    }
    long page = sysconf(_SC_PAGESIZE);
    void *page_start = (void *)((uintptr_t)slot & ~(uintptr_t)(page - 1));
    if (mprotect(page_start, (size_t)page, PROT_READ | PROT_WRITE) != 0) { /* -z relro -z now: read-only */
        perror("plt_calls: mprotect");
        return 1;
    }
    *slot = stub;
    if (argc > 1) {
        int ready_fd = atoi(argv[1]);
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    spin_calls();
    return 0;
}
