/*
 * replay.c - runs the fuzz target over every file of the directories given: the inputs the
 * fuzzer found (tests/fuzz/regressions) and the shipped configurations (its seed corpus), so
 * every build, sanitized or not, replays them. Exit 0 when all ran.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  unsigned char *buf = NULL;
  size_t len = 0, cap = 0;
  int c;
  while ((c = fgetc(f)) != EOF) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      unsigned char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = nb;
    }
    buf[len++] = (unsigned char)c;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf ? buf : (const unsigned char *)"", len);
  free(buf);
  return 1;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    DIR *d = opendir(argv[i]);
    if (!d) {
      fprintf(stderr, "replay: cannot open %s\n", argv[i]);
      return 1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096];
      snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
      int rc = replay_file(path);
      if (rc < 0)
        return 1;
      files += rc;
    }
    closedir(d);
  }
  printf("replayed %d inputs\n", files);
  return files > 0 ? 0 : 1;
}
