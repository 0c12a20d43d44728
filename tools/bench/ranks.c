/* ranks.c - one process per GPU: fork, NCCL id exchange, output forwarding, timeouts (ranks.h). */
#include "ranks.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgrt/cgrt.h"

#ifdef CGRT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef CGRT_HAVE_NCCL
#include <nccl.h>
#endif

#define GRACE_S    20   /* how long the others may run on once a rank failed */
#define DRAIN_S    2    /* how long to read output after the last rank exited */
#define LINE_BYTES 4096 /* longest line forwarded in one piece */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

void *cgrt_ranks_shared(size_t bytes) {
  void *p =
      mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p; /* anonymous mappings come zeroed */
}

void cgrt_ranks_shared_free(void *p, size_t bytes) {
  if (p)
    munmap(p, bytes ? bytes : 1);
}

#ifdef CGRT_HAVE_CUDA
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Reads exactly n bytes from fd within the deadline; 0 or -1. */
static int read_full(int fd, void *buf, size_t n, double deadline) {
  size_t got = 0;
  while (got < n) {
    double left = deadline - now_s();
    if (left <= 0)
      return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      return -1;
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

/* What the device-counting child sends back. */
struct probe_result {
  int ok;
  int count;
  char why[200];
};

#endif

int cgrt_count_devices(int *count, char *err, size_t errlen) {
  *count = 0;
#ifndef CGRT_HAVE_CUDA
  set_err(err, errlen, "no CUDA device: cgrt was built without CUDA support");
  return CGRT_E_NODEV;
#else
  int fds[2];
  if (pipe(fds) != 0) {
    set_err(err, errlen, "counting GPUs: pipe failed: %s", strerror(errno));
    return CGRT_E_IO;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    set_err(err, errlen, "counting GPUs: fork failed: %s", strerror(errno));
    return CGRT_E_IO;
  }
  if (pid == 0) {
    struct probe_result r = {0};
    close(fds[0]);
    cudaError_t e = cudaGetDeviceCount(&r.count);
    r.ok = e == cudaSuccess;
    if (!r.ok)
      snprintf(r.why, sizeof(r.why), "%s", cudaGetErrorString(e));
    ssize_t w = write(fds[1], &r, sizeof(r));
    _exit(w == (ssize_t)sizeof(r) ? 0 : 1); /* a probe: no teardown worth waiting for */
  }
  close(fds[1]);
  struct probe_result r = {0};
  int rc = read_full(fds[0], &r, sizeof(r), now_s() + 120);
  close(fds[0]);
  if (rc != 0)
    kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  if (rc != 0) {
    set_err(err, errlen, "no CUDA device: the process counting GPUs failed or hung");
    return CGRT_E_NODEV;
  }
  if (!r.ok) {
    set_err(err, errlen, "no CUDA device: cudaGetDeviceCount: %s", r.why);
    return CGRT_E_NODEV;
  }
  if (r.count < 1) {
    set_err(err, errlen, "no CUDA device: cudaGetDeviceCount returned 0");
    return CGRT_E_NODEV;
  }
  *count = r.count;
  return 0;
#endif
}

int cgrt_rank_comm_init(void **comm, int rank, int nranks, const void *nccl_id, size_t id_len,
                        char *err, size_t errlen) {
  *comm = NULL;
#ifndef CGRT_HAVE_NCCL
  (void)rank;
  (void)nranks;
  (void)nccl_id;
  (void)id_len;
  set_err(err, errlen, "cgrt was built without NCCL");
  return CGRT_E_UNSUPPORTED;
#else
  ncclUniqueId id;
  if (!nccl_id || id_len != sizeof(id)) {
    set_err(err, errlen, "rank %d: the NCCL id has %zu bytes, not %zu", rank, id_len, sizeof(id));
    return CGRT_E_INVAL;
  }
  memcpy(&id, nccl_id, sizeof(id));
  ncclComm_t c = NULL;
  ncclResult_t nr = ncclCommInitRank(&c, nranks, id, rank);
  if (nr != ncclSuccess) {
    set_err(err, errlen, "rank %d: ncclCommInitRank (%d ranks): %s (%s)", rank, nranks,
            ncclGetErrorString(nr), ncclGetLastError(NULL));
    return CGRT_E_DEVICE;
  }
  *comm = c;
  return 0;
#endif
}

int cgrt_rank_comm_destroy(void *comm, char *err, size_t errlen) {
  if (!comm)
    return 0;
#ifndef CGRT_HAVE_NCCL
  set_err(err, errlen, "cgrt was built without NCCL");
  return CGRT_E_UNSUPPORTED;
#else
  ncclComm_t c = (ncclComm_t)comm;
  ncclResult_t nr = ncclCommFinalize(c);
  const char *what = "ncclCommFinalize";
  ncclResult_t nd = ncclCommDestroy(c);
  if (nr == ncclSuccess && nd != ncclSuccess) {
    nr = nd;
    what = "ncclCommDestroy";
  }
  if (nr != ncclSuccess) {
    set_err(err, errlen, "%s: %s", what, ncclGetErrorString(nr));
    return CGRT_E_DEVICE;
  }
  return 0;
#endif
}

#if defined(CGRT_HAVE_CUDA) && defined(CGRT_HAVE_NCCL)

/* Appends "; "-separated text to err. */
static void add_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0)
    return;
  size_t n = strlen(err);
  if (n > 0 && n + 2 < errlen) {
    memcpy(err + n, "; ", 3);
    n += 2;
  }
  if (n + 1 >= errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + n, errlen - n, fmt, ap);
  va_end(ap);
}

/* The NCCL id, from rank 0 to the others. state: 0 not yet, 1 ready, -1 rank 0 failed. */
struct id_share {
  int state;
  size_t len;
  unsigned char id[256];
};

/* A child: set up the rank, get the id, run the rank's work. Returns the exit code. */
static int rank_child(int rank, int nranks, cgrt_rank_main_fn rank_main, void *arg,
                      struct id_share *sh, int timeout_s) {
  /* NVLink multicast (NVLS) stays off on the lent machines, whatever the environment says. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  ncclUniqueId id;
  cudaError_t e = cudaSetDevice(rank);
  if (e != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaSetDevice(%d): %s\n", rank, rank, cudaGetErrorString(e));
    if (rank == 0)
      __atomic_store_n(&sh->state, -1, __ATOMIC_RELEASE);
    return 1;
  }
  if (rank == 0) {
    ncclResult_t nr = ncclGetUniqueId(&id);
    if (nr != ncclSuccess) {
      fprintf(stderr, "rank 0: ncclGetUniqueId: %s\n", ncclGetErrorString(nr));
      __atomic_store_n(&sh->state, -1, __ATOMIC_RELEASE);
      return 1;
    }
    memcpy(sh->id, &id, sizeof(id));
    sh->len = sizeof(id);
    __atomic_store_n(&sh->state, 1, __ATOMIC_RELEASE);
  } else {
    const double deadline = now_s() + timeout_s;
    int state;
    while ((state = __atomic_load_n(&sh->state, __ATOMIC_ACQUIRE)) == 0 && now_s() < deadline)
      usleep(1000);
    if (state != 1) {
      fprintf(stderr, "rank %d: no NCCL id from rank 0 (%s)\n", rank,
              state < 0 ? "it failed to create one" : "timed out waiting");
      return 1;
    }
    memcpy(&id, sh->id, sizeof(id));
  }
  return rank_main(rank, nranks, &id, sizeof(id), arg);
}

/* One child as the parent sees it. */
struct rank_proc {
  pid_t pid;
  int fd;      /* read end of its output pipe; -1 once closed */
  int running; /* not yet reaped */
  int status;  /* waitpid status once reaped */
  int killed;  /* killed by the parent */
  size_t len;  /* bytes of an unfinished line in buf */
  char buf[LINE_BYTES];
  char last[160]; /* the last complete line, for messages */
};

/* Writes one line of rank r's output where it belongs. */
static void emit_line(int r, const char *s, size_t n) {
  if (r == 0) {
    fwrite(s, 1, n, stdout);
    fputc('\n', stdout);
    fflush(stdout);
  } else {
    fprintf(stderr, "[rank %d] %.*s\n", r, (int)n, s);
  }
}

static void keep_last(struct rank_proc *p, const char *s, size_t n) {
  if (n == 0)
    return;
  if (n >= sizeof(p->last))
    n = sizeof(p->last) - 1;
  memcpy(p->last, s, n);
  p->last[n] = '\0';
}

/* Reads what rank r has written; forwards complete lines. Closes the pipe at EOF. */
static void drain(struct rank_proc *p, int r) {
  for (;;) {
    ssize_t n = read(p->fd, p->buf + p->len, sizeof(p->buf) - p->len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return; /* EAGAIN: nothing more now */
    if (n == 0) {
      if (p->len > 0) {
        emit_line(r, p->buf, p->len);
        keep_last(p, p->buf, p->len);
      }
      p->len = 0;
      close(p->fd);
      p->fd = -1;
      return;
    }
    p->len += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i < p->len; i++)
      if (p->buf[i] == '\n') {
        emit_line(r, p->buf + start, i - start);
        keep_last(p, p->buf + start, i - start);
        start = i + 1;
      }
    if (start == 0 && p->len == sizeof(p->buf)) { /* a line longer than the buffer */
      emit_line(r, p->buf, p->len);
      start = p->len;
    }
    memmove(p->buf, p->buf + start, p->len - start);
    p->len -= start;
  }
}

static void kill_rank(struct rank_proc *p) {
  kill(-p->pid, SIGKILL); /* its process group */
  kill(p->pid, SIGKILL);
  p->killed = 1;
}

static int failed(const struct rank_proc *p) {
  return !p->running && !(WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0);
}

int cgrt_run_ranks(int nranks, cgrt_rank_main_fn rank_main, void *arg, int timeout_s, char *err,
                   size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (nranks < 1 || nranks > CGRT_RANKS_MAX || !rank_main || timeout_s < 1) {
    set_err(err, errlen, "cgrt_run_ranks: %d ranks (1 to %d), a rank function and a timeout >= 1 s",
            nranks, CGRT_RANKS_MAX);
    return CGRT_E_INVAL;
  }
  int ndev = 0;
  int rc = cgrt_count_devices(&ndev, err, errlen);
  if (rc != 0)
    return rc;
  if (ndev < nranks) {
    set_err(err, errlen,
            "%d ranks need %d GPUs (one process per GPU), but %d %s visible (CUDA_VISIBLE_DEVICES "
            "limits them)",
            nranks, nranks, ndev, ndev == 1 ? "is" : "are");
    return CGRT_E_NODEV;
  }
  struct id_share *sh = cgrt_ranks_shared(sizeof(*sh));
  struct rank_proc *procs = calloc((size_t)nranks, sizeof(*procs));
  if (!sh || !procs) {
    set_err(err, errlen, "cgrt_run_ranks: out of memory (or mmap failed)");
    cgrt_ranks_shared_free(sh, sizeof(*sh));
    free(procs);
    return CGRT_E_IO;
  }
  for (int r = 0; r < nranks; r++)
    procs[r].fd = -1;
  const pid_t parent = getpid();
  int started = 0;
  fflush(NULL); /* children must not inherit buffered output */
  for (int r = 0; r < nranks; r++) {
    int fds[2];
    if (pipe(fds) != 0) {
      set_err(err, errlen, "cgrt_run_ranks: pipe failed: %s", strerror(errno));
      rc = CGRT_E_IO;
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      set_err(err, errlen, "cgrt_run_ranks: fork of rank %d failed: %s", r, strerror(errno));
      close(fds[0]);
      close(fds[1]);
      rc = CGRT_E_IO;
      break;
    }
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the parent */
      if (getppid() != parent)
        _exit(1);
      for (int i = 0; i < r; i++)
        close(procs[i].fd);
      close(fds[0]);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[1]);
      setvbuf(stdout, NULL, _IOLBF, 0);
      setvbuf(stderr, NULL, _IONBF, 0);
      int code = rank_child(r, nranks, rank_main, arg, sh, timeout_s);
      fflush(NULL);
      exit(code); /* full teardown: a hang here is caught by the parent's timeout */
    }
    setpgid(pid, pid); /* also done by the child; whichever runs first */
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    procs[r].pid = pid;
    procs[r].fd = fds[0];
    procs[r].running = 1;
    started++;
  }
  if (rc != 0)
    for (int r = 0; r < started; r++)
      kill_rank(&procs[r]);

  double deadline = now_s() + timeout_s, drain_until = 0;
  int first_failed = -1, grace = 0;
  for (;;) {
    int running = 0, open_fds = 0;
    struct pollfd pf[CGRT_RANKS_MAX];
    int pr[CGRT_RANKS_MAX];
    for (int r = 0; r < started; r++) {
      running += procs[r].running;
      if (procs[r].fd >= 0) {
        pf[open_fds] = (struct pollfd){.fd = procs[r].fd, .events = POLLIN};
        pr[open_fds++] = r;
      }
    }
    if (running == 0 && (open_fds == 0 || (drain_until > 0 && now_s() > drain_until)))
      break;
    if (running == 0 && drain_until == 0)
      drain_until = now_s() + DRAIN_S;
    if (open_fds > 0) {
      if (poll(pf, (nfds_t)open_fds, 50) > 0)
        for (int i = 0; i < open_fds; i++)
          if (pf[i].revents)
            drain(&procs[pr[i]], pr[i]);
    } else {
      usleep(50000);
    }
    for (int r = 0; r < started; r++) {
      if (!procs[r].running)
        continue;
      pid_t w = waitpid(procs[r].pid, &procs[r].status, WNOHANG);
      if (w == procs[r].pid) {
        procs[r].running = 0;
        if (failed(&procs[r]) && first_failed < 0 && !procs[r].killed) {
          first_failed = r;
          if (deadline > now_s() + GRACE_S) {
            deadline = now_s() + GRACE_S;
            grace = 1;
          }
        }
      }
    }
    if (now_s() > deadline) {
      for (int r = 0; r < started; r++)
        if (procs[r].running)
          kill_rank(&procs[r]);
      deadline = now_s() + 3600; /* killed: reaped on the next rounds */
    }
  }
  for (int r = 0; r < started; r++)
    if (procs[r].fd >= 0) {
      drain(&procs[r], r);
      if (procs[r].fd >= 0)
        close(procs[r].fd);
    }

  if (rc == 0) {
    for (int r = 0; r < started; r++) {
      const struct rank_proc *p = &procs[r];
      if (!failed(p))
        continue;
      rc = CGRT_E_CALLBACK;
      if (p->killed && grace)
        add_err(err, errlen,
                "rank %d stopped %d s after rank %d failed (it was probably waiting on it in a "
                "collective)",
                r, GRACE_S, first_failed);
      else if (p->killed)
        add_err(err, errlen,
                "rank %d hung (timeout after %d s): a hang at teardown is a failure%s%s", r,
                timeout_s, p->last[0] ? "; its last output: " : "", p->last);
      else if (WIFSIGNALED(p->status))
        add_err(err, errlen, "rank %d was killed by signal %d (%s)", r, WTERMSIG(p->status),
                strsignal(WTERMSIG(p->status)));
      else
        add_err(err, errlen, "rank %d exited with code %d", r, WEXITSTATUS(p->status));
    }
  }
  cgrt_ranks_shared_free(sh, sizeof(*sh));
  free(procs);
  return rc;
}

#else

int cgrt_run_ranks(int nranks, cgrt_rank_main_fn rank_main, void *arg, int timeout_s, char *err,
                   size_t errlen) {
  (void)nranks;
  (void)rank_main;
  (void)arg;
  (void)timeout_s;
#ifndef CGRT_HAVE_CUDA
  set_err(err, errlen, "no CUDA device: cgrt was built without CUDA support");
  return CGRT_E_NODEV;
#else
  set_err(err, errlen, "cgrt was built without NCCL: multi-GPU runs need it");
  return CGRT_E_UNSUPPORTED;
#endif
}

#endif
