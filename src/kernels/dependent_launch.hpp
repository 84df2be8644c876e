// Host side of programmatic dependent launch (dependent_launch.cuh has the device side).
#pragma once

namespace fp4moe::kernels {

// Whether `kernel`'s launches on the current device may overlap their
// predecessor: FP4MOE_NO_PDL unset, an sm_90+ device, and the kernel's code
// compiled for compute_90+ (code JIT-compiled from the compute_80 PTX on a
// newer GPU has no griddepcontrol.wait, so it must not start early).
bool dependent_launch_enabled(const void* kernel);

// The same for fp4moe's kernels on the current device (asked of a probe kernel built like them).
bool dependent_launch_available();

// For bench_host_overhead only: while set, every fp4moe launch is prepared and
// checked as always but not handed to the driver, so that the host work of a
// forward can be timed apart from the driver's own cost per launch. Results
// are then meaningless; nothing in the library sets it.
void skip_launches_for_host_timing(bool skip);
bool launches_skipped();

}  // namespace fp4moe::kernels
