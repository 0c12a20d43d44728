/* driver.c - the driver registry and the shared error helper. */
#include "driver.h"

#include <stdarg.h>
#include <stdio.h>

const struct cgrt_driver *cgrt__driver_for(cgrt_driver_kind kind) {
  return kind == CGRT_DRIVER_HOST ? &cgrt__driver_host : &cgrt__driver_cuda;
}

int cgrt__dev_fail(struct cgrt_dev *dev, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dev->err, sizeof(dev->err), fmt, ap);
  va_end(ap);
  return code;
}
