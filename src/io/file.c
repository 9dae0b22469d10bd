#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/file.h"
#include "io/json.h"
#include "io/r1_basis.h"

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

static int copy_file(const char *src, const char *dst, bs_err *err) {
    size_t len;
    char *buf = bs_read_file(src, &len, err);
    if (!buf) return -1;
    FILE *f = fopen(dst, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f)) ok = 0;
    free(buf);
    return ok ? 0 : bs_fail(err, "%s: cannot write (%m)", dst);
}

int bs_copy_model_extras(const char *in_dir, const char *out_dir, bs_err *err) {
    DIR *d = opendir(in_dir);
    if (!d) return bs_fail(err, "%s: cannot list the folder", in_dir);
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        const char *n = de->d_name;
        size_t l = strlen(n);
        if (n[0] == '.' || !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
            (l > 12 && !strcmp(n + l - 12, ".safetensors") && strcmp(n, BS_R1_FILE)))
            continue;
        char src[4096], dst[4096];
        struct stat st;
        snprintf(src, sizeof src, "%s/%s", in_dir, n);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, n);
        if (stat(src, &st) == 0 && S_ISREG(st.st_mode)) rc = copy_file(src, dst, err);
    }
    closedir(d);
    return rc;
}
