/*
 * hide_cuda.c - an rtld-audit library (LD_AUDIT=libcgrt-test-hide-cuda.so) that hides CUDA's
 * libraries from the dynamic loader, as on a machine where they are not installed: every search
 * for the CUDA driver or runtime, NCCL, CUPTI, cuBLAS, NVRTC or an NVIDIA driver library, by name
 * or by path, NEEDED entry or dlopen, rpath or not, is refused (la_objsearch returns NULL, so the
 * loader reports "cannot open shared object file"). Each refused name is appended to the file
 * $CGRT_HIDE_CUDA_LOG, when set, one per line: a test can tell "loaded nothing of CUDA" from
 * "tried and was refused". Used by tests/hide_cuda/run.sh.
 */
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const hidden[] = {"libcuda.",  "libcudart", "libnccl",    "libcupti",
                                     "libcublas", "libnvrtc",  "libnvidia-", "libnvJitLink"};

__attribute__((visibility("default"))) unsigned int la_version(unsigned int version) {
  (void)version;
  return LAV_CURRENT;
}

static int is_hidden(const char *name) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++)
    if (strncmp(base, hidden[i], strlen(hidden[i])) == 0)
      return 1;
  return 0;
}

static void note(const char *name) {
  const char *log = getenv("CGRT_HIDE_CUDA_LOG");
  if (!log || !log[0])
    return;
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0)
    return;
  ssize_t w = write(fd, name, strlen(name));
  w += write(fd, "\n", 1);
  (void)w;
  close(fd);
}

__attribute__((visibility("default"))) char *la_objsearch(const char *name, uintptr_t *cookie,
                                                          unsigned int flag) {
  (void)cookie;
  if (is_hidden(name)) {
    if (flag == LA_SER_ORIG)
      note(name);
    return NULL;
  }
  return (char *)name;
}
