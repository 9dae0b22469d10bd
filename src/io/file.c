#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/file.h"

int bs_open_regular(const char *path, size_t *size, bs_err *err) {
    // O_NONBLOCK makes open() of a FIFO return at once; fstat then tells what it is.
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return bs_fail(err, "%s: cannot open (%m)", path);
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return bs_fail(err, "%s: cannot stat (%m)", path); }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return bs_fail(err, "%s: not a regular file (%s): blockspec reads only regular files", path,
                       S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a socket or other special file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size) *size = (size_t)st.st_size;
    return fd;
}
