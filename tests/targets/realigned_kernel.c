/* Test target: a hand-written kernel without CFI that realigns its stack, as OpenBLAS's x86-64 gemm kernels
 * do (kernel/x86_64/dgemm_kernel_4x8_haswell.S and the rest: the PROLOGUE macro, then `movq %rsp, %rbx;
 * subq $N, %rsp; andq $-4096, %rsp`). After the `and`, only the copy of rsp in rbx says where the return
 * address is; rbp is a loop counter, not a frame pointer.
 *
 *   main -> drive -> realigned_kernel
 *
 * argv[1]: a file descriptor to write "ready\n" to once the hot loop runs.
 */
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

long realigned_kernel(long n);

/* No .cfi_* directives: the assembler writes no FDE for it, as for OpenBLAS's kernels. */
__asm__(
    "    .text\n"
    "    .globl realigned_kernel\n"
    "    .type realigned_kernel, @function\n"
    "realigned_kernel:\n"
    "    subq $0x60, %rsp\n"
    "    movq %rbx, (%rsp)\n"
    "    movq %rbp, 0x8(%rsp)\n"
    "    movq %rsp, %rbx\n"
    "    subq $0x2000, %rsp\n"
    "    andq $-4096, %rsp\n"
    "    movq %rdi, %rcx\n"
    "    xorl %ebp, %ebp\n"
    "    xorl %eax, %eax\n"
    "1:  movq %rbp, %rdx\n"
    "    andq $0x3ff, %rdx\n"
    "    addq %rcx, (%rsp,%rdx,8)\n"
    "    addq (%rsp,%rdx,8), %rax\n"
    "    incq %rbp\n"
    "    decq %rcx\n"
    "    jnz 1b\n"
    "    movq %rbx, %rsp\n"
    "    movq (%rsp), %rbx\n"
    "    movq 0x8(%rsp), %rbp\n"
    "    addq $0x60, %rsp\n"
    "    ret\n"
    "    .size realigned_kernel, .-realigned_kernel\n");

volatile long sink;

NOINLINE long drive(long n) {
    long s = 0;
    for (int i = 0; i < 100; i++) s += realigned_kernel(n);
    return s;
}

int main(int argc, char **argv) {
    int ready_fd = argc > 1 ? atoi(argv[1]) : -1;
    sink = drive(10);
    if (ready_fd >= 0) {
        if (write(ready_fd, "ready\n", 6) != 6) return 1;
        close(ready_fd);
    }
    for (;;) sink = drive(100000);
}
