// Per-thread scratch buffers (`static __thread` pointers that grow as needed) are freed when their thread
// exits. Without this, a thread that computes and then ends (a server's engine thread, an embedder's
// worker) leaks every buffer it grew. Register a slot once per thread, before its first allocation.
#pragma once

// *slot is freed (free()) when the calling thread exits. At most BS_THREAD_SCRATCH_MAX slots per thread;
// beyond that the buffer simply lives as long as the process.
#define BS_THREAD_SCRATCH_MAX 16
void bs_thread_scratch_register(void **slot);
