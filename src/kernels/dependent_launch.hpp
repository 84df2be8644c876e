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

}  // namespace fp4moe::kernels
