/* test_faults.c - the fault-injection suite (tests/common/faults.h) on the host driver. */
#include "common/faults.h"

int main(void) {
  faults_driver = "host";
  const struct CMUnitTest tests[] = {FAULT_TESTS};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
