/*
 * stepbits.c - an LD_PRELOAD shim that makes llm.c's step line exact, without changing llm.c.
 *
 * train_gpt2cu prints each training step's loss with 6 decimals and its grad norm with 4. The
 * test compares them bit for bit between unpatched llm.c and the port, so for each call of printf
 * with llm.c's step format this shim first prints the same values exactly (C99 %a) and the step's
 * time with all its digits:
 *
 *     stepbits 3 loss 0x1.5d1c7ap+3 norm 0x1.2f0e4cp+2 lr 0x1.3a92a4p-12 ms 12.345678
 *
 * Both binaries run under it, so both are read the same way. It also makes stdout line-buffered.
 * Build:
 *     cc -shared -fPIC -O2 -o stepbits.so stepbits.c -ldl
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The start of the format of llm.c's printf0 in the training loop of train_gpt2.cu. */
static const char step_format[] =
    "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms";

static void note_step(const char *fmt, va_list ap) {
  if (strncmp(fmt, step_format, sizeof(step_format) - 1) != 0)
    return;
  va_list aq;
  va_copy(aq, ap);
  int step = va_arg(aq, int);
  (void)va_arg(aq, int); /* of steps */
  double loss = va_arg(aq, double);
  (void)va_arg(aq, double); /* the loss z-score */
  double norm = va_arg(aq, double);
  (void)va_arg(aq, double); /* the norm z-score */
  double lr = va_arg(aq, double);
  double ms = va_arg(aq, double);
  va_end(aq);
  fprintf(stdout, "stepbits %d loss %a norm %a lr %a ms %.6f\n", step, loss, norm, lr, ms);
}

/*
 * stdout line by line, as on a terminal, also into a file: a run that hangs, or is killed by a
 * timeout, still leaves every line it printed (the two-GPU runs write each rank to a file).
 */
__attribute__((constructor)) static void line_buffered(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
}

/* A step's exact line first (if it is a step's), then llm.c's line as it printed it. */
static int print_noted(const char *fmt, va_list ap) {
  note_step(fmt, ap);
  return vprintf(fmt, ap);
}

int printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = print_noted(fmt, ap);
  va_end(ap);
  return n;
}

/* The same call when the binary was built with _FORTIFY_SOURCE. */
int __printf_chk(int flag, const char *fmt, ...) {
  (void)flag;
  va_list ap;
  va_start(ap, fmt);
  int n = print_noted(fmt, ap);
  va_end(ap);
  return n;
}
