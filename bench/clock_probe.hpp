// What a latency benchmark needs beside the kernel it times: the SM clock the
// GPU runs at right now (a kernel that counts SM cycles against the global
// nanosecond timer), a spell of busy SMs that brings the clock up from idle, and
// the smallest dependent launch (the floor under a tiny kernel's time).
#pragma once
#include <cuda_runtime.h>

namespace fp4moe::bench {

// The SM clock in MHz: one CTA spins ~50 us counting clock64 against %globaltimer. Synchronises.
double sm_clock_mhz(cudaStream_t stream);

// Every SM spins for about `us` microseconds (no memory traffic).
void keep_sms_busy(double us, cudaStream_t stream);

// An empty kernel launched as fp4moe launches its kernels (dependent launch,
// wait for the prior grid, then allow the next): the per-launch floor.
void launch_empty_dependent(cudaStream_t stream);

}  // namespace fp4moe::bench
