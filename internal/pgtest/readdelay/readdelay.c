/*
 * A preload library that delays every read a PostgreSQL server makes from
 * a file by PARAPPLY_READ_DELAY_NS nanoseconds, as a network-attached cloud
 * disk would: pread, preadv and preadv2 (what PostgreSQL uses for relation
 * and WAL files, in backends and in PostgreSQL 18's I/O worker processes).
 * Built and used by the benchmark's --read-delay; reads of sockets and
 * pipes (read, recv) are not delayed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static long delay_ns = -1;

static void pause_read(void)
{
	if (delay_ns < 0)
	{
		const char *v = getenv("PARAPPLY_READ_DELAY_NS");
		delay_ns = v ? atol(v) : 0;
	}
	if (delay_ns > 0)
	{
		struct timespec ts = {delay_ns / 1000000000L, delay_ns % 1000000000L};
		while (nanosleep(&ts, &ts) != 0)
			;
	}
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, void *, size_t, off_t);
	if (!real)
		real = dlsym(RTLD_NEXT, "pread");
	pause_read();
	return real(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, void *, size_t, off_t);
	if (!real)
		real = dlsym(RTLD_NEXT, "pread64");
	pause_read();
	return real(fd, buf, n, off);
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t);
	if (!real)
		real = dlsym(RTLD_NEXT, "preadv");
	pause_read();
	return real(fd, iov, cnt, off);
}

ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t);
	if (!real)
		real = dlsym(RTLD_NEXT, "preadv64");
	pause_read();
	return real(fd, iov, cnt, off);
}

ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	static ssize_t (*real)(int, const struct iovec *, int, off_t, int);
	if (!real)
		real = dlsym(RTLD_NEXT, "preadv2");
	pause_read();
	return real(fd, iov, cnt, off, flags);
}
