/* Test target: a hand-written kernel that nothing but a stack scan can step. It has no CFI, uses rbp as a
 * loop counter, and realigns its stack keeping the old rsp in memory only (in rax, then a stack slot), so
 * prologue analysis cannot say where its return address is. Its frame also holds a stale return address
 * of a call to another function, as a frame's uninitialised slots often do.
 *
 *   main -> drive -> opaque_kernel
 *
 * argv[1]: a file descriptor to write "ready\n" to once the hot loop runs.
 */
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

long opaque_kernel(long n);
NOINLINE long other_function(long x) { return x + 1; }
NOINLINE long stale_caller(long x);

/* No .cfi_* directives: the assembler writes no FDE for these. */
__asm__(
    "    .text\n"
    "    .globl stale_caller\n"
    "    .type stale_caller, @function\n"
    "stale_caller:\n"
    "    subq $8, %rsp\n"
    "    call other_function\n"
    ".Lstale_return:\n"
    "    addq $8, %rsp\n"
    "    ret\n"
    "    .size stale_caller, .-stale_caller\n"
    "    .globl opaque_kernel\n"
    "    .type opaque_kernel, @function\n"
    "opaque_kernel:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    movq %rsp, %rax\n"
    "    andq $-64, %rsp\n"
    "    subq $0x40, %rsp\n"
    "    movq %rax, 0x38(%rsp)\n"
    "    leaq .Lstale_return(%rip), %rdx\n"
    "    movq %rdx, 0x10(%rsp)\n"
    "    movq %rdi, %rcx\n"
    "    movl $1, %ebp\n"
    "    xorl %eax, %eax\n"
    "1:  addq %rbp, %rax\n"
    "    incq %rbp\n"
    "    decq %rcx\n"
    "    jnz 1b\n"
    "    movq 0x38(%rsp), %rsp\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    "    .size opaque_kernel, .-opaque_kernel\n");

volatile long sink;

NOINLINE long drive(long n) {
    long s = 0;
    for (int i = 0; i < 100; i++) s += opaque_kernel(n);
    return s;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    sink = drive(10) + stale_caller(1);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    for (;;) sink = drive(100000);
}
