// The loss plot (trainer.h): gnuplot from Debian (gnuplot-nox, `make deps`) through a pipe, reading the CSV
// log. Without gnuplot the plot is skipped and the caller told so; a missing plot never fails a run.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "train/trainer.h"

static int have_gnuplot(void) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char *p = strdup(path), *save = NULL;
    int found = 0;
    for (char *d = strtok_r(p, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char f[4096];
        snprintf(f, sizeof f, "%s/gnuplot", *d ? d : ".");
        found = access(f, X_OK) == 0;
    }
    free(p);
    return found;
}

static int has_heldout(const char *out_dir) {
    char path[4200], line[512];
    snprintf(path, sizeof path, "%s/train_log.csv", out_dir);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, ",heldout,") != NULL;
    if (f) fclose(f);
    return found;
}

int bs_train_plot(const char *out_dir, bs_err *err) {
    if (!have_gnuplot()) {
        bs_fail(err, "loss plot skipped: gnuplot is not installed (apt-get install gnuplot-nox); the CSV log has every value");
        return 1;
    }
    char cmd[4200], png[4200], tmp[4300];
    snprintf(png, sizeof png, "%s/loss.png", out_dir);
    snprintf(tmp, sizeof tmp, "%s/loss.png.tmp", out_dir);
    snprintf(cmd, sizeof cmd, "gnuplot >/dev/null 2>&1");
    char held[4400];
    snprintf(held, sizeof held, ", \\\n     \"< grep ',heldout,' '%s/train_log.csv'\" using 1:3 with linespoints pt 7 lw 2 title 'held-out'", out_dir);
    FILE *g = popen(cmd, "w");
    if (!g) return bs_fail(err, "loss plot: cannot start gnuplot (%m)");
    // Columns of train_log.csv: 1 step, 2 split, 3 loss. The two splits are separated with grep (a 1/0 filter
    // would break the train line at every held-out row).
    fprintf(g,
        "set terminal pngcairo size 900,540 noenhanced\n"
        "set output '%s'\n"
        "set datafile separator ','\n"
        "set key top right\n"
        "set xlabel 'step'\nset ylabel 'loss'\nset grid\n"
        "set title 'training loss (%s)'\n"
        "plot \"< grep ',train,' '%s/train_log.csv'\" using 1:3 with lines lw 2 title 'train'%s\n",
        tmp, out_dir, out_dir, has_heldout(out_dir) ? held : "");
    int st = pclose(g);
    if (st != 0 || access(tmp, R_OK) != 0) { unlink(tmp); return bs_fail(err, "loss plot: gnuplot failed (exit status %d) on %s/train_log.csv", st, out_dir); }
    if (rename(tmp, png) != 0) { unlink(tmp); return bs_fail(err, "loss plot: cannot write %s (%m)", png); }
    return 0;
}
