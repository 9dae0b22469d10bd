// A pthread key whose destructor frees the registered slots of the exiting thread.
#include <pthread.h>
#include <stdlib.h>
#include "util/thread_scratch.h"

typedef struct { void **slot[BS_THREAD_SCRATCH_MAX]; int n; } slots;

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread slots mine;

static void free_slots(void *p) {
    slots *s = p;
    for (int i = 0; i < s->n; i++) { free(*s->slot[i]); *s->slot[i] = NULL; }
    s->n = 0;
}

static void make_key(void) { pthread_key_create(&key, free_slots); }

void bs_thread_scratch_register(void **slot) {
    pthread_once(&once, make_key);
    for (int i = 0; i < mine.n; i++) if (mine.slot[i] == slot) return;
    if (mine.n == BS_THREAD_SCRATCH_MAX) return;
    mine.slot[mine.n++] = slot;
    pthread_setspecific(key, &mine);
}
