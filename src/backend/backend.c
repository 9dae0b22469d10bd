// The backend's sticky fault (backend.h): how an op that returns void reports that it could not run.
#include <stdarg.h>
#include <stdio.h>
#include "backend/backend.h"

void bs_backend_fail(bs_backend *be, const char *fmt, ...) {
    // The first failure wins: ops may run on several pool threads at once, and the first message is the
    // cause (what follows it computed from garbage). 1 = being written, 2 = message complete.
    int expected = 0;
    if (!__atomic_compare_exchange_n(&be->failed, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->fault.msg, sizeof be->fault.msg, fmt, ap);
    va_end(ap);
    __atomic_store_n(&be->failed, 2, __ATOMIC_RELEASE);
}

int bs_backend_check(bs_backend *be, bs_err *err) {
    if (!__atomic_load_n(&be->failed, __ATOMIC_ACQUIRE)) return 0;
    // Every op has returned when its caller checks (the thread pool joins its tasks), so the message is whole.
    bs_fail(err, "%s: %s", be->name, be->fault.msg);
    be->fault.msg[0] = 0;
    __atomic_store_n(&be->failed, 0, __ATOMIC_RELEASE);
    return -1;
}
