// fakeclock: an LD_PRELOAD shim that gives a process a wall clock read
// from shared memory, for tests of time-dependent Redis scripts.
//
// SLUICE_FAKE_CLOCK_FILE names a file whose first 8 bytes are an int64:
// microseconds since the Unix epoch. The file is mapped shared, and every
// read of the wall clock (clock_gettime of CLOCK_REALTIME*, gettimeofday,
// time) loads that int64 atomically; the test moves the clock by storing a
// new value. Other clocks (CLOCK_MONOTONIC for Redis's event loop) are the
// real ones. The shim never allocates or calls dlsym, so it cannot recurse
// into an allocator (jemalloc) that reads the clock while it initializes.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *fake;

static int64_t fake_us(void) {
  volatile int64_t *p = __atomic_load_n(&fake, __ATOMIC_ACQUIRE);
  if (p == NULL) {
    const char *path = getenv("SLUICE_FAKE_CLOCK_FILE");
    if (path == NULL) return -1;
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    void *m = (void *)syscall(SYS_mmap, NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
    syscall(SYS_close, fd);
    if (m == MAP_FAILED) return -1;
    volatile int64_t *expected = NULL;
    if (!__atomic_compare_exchange_n(&fake, &expected, (volatile int64_t *)m, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      syscall(SYS_munmap, m, 8); // another thread mapped it first
    }
    p = __atomic_load_n(&fake, __ATOMIC_ACQUIRE);
  }
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
    int64_t us = fake_us();
    if (us >= 0) {
      ts->tv_sec = us / 1000000;
      ts->tv_nsec = (us % 1000000) * 1000;
      return 0;
    }
  }
  return (int)syscall(SYS_clock_gettime, id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  (void)tz;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (tv != NULL) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return 0;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t != NULL) *t = ts.tv_sec;
  return ts.tv_sec;
}
