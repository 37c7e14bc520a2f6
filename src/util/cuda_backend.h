// LibTorch's CUDA part, loaded when a run asks for a CUDA device.
//
// The torch wheel's LibTorch is its CUDA build, but rlcpp links its CPU part alone (libtorch_cpu and
// libc10; the linker's --as-needed leaves out the libraries no symbol of rlcpp's needs), so a run on
// the CPU does not map the CUDA libraries: about 400 MB of resident memory and a third of a second
// a process, measured with the 2.15 wheel. A run that asks for a CUDA device loads them then:
// libtorch_cuda.so, found beside libtorch_cpu.so through the program's run path, whose static
// initialisers register the CUDA kernels and hooks with LibTorch's dispatcher.
#pragma once

#include <string>

namespace rlcpp {

// Loads LibTorch's CUDA part (once) and returns "" when a CUDA device can be used, else why not.
std::string load_cuda_backend();

// fp32 matrix products on CUDA in TF32 (true) or IEEE fp32 (false): PyTorch's
// torch.backends.cuda.matmul.fp32_precision. No effect on the CPU.
void set_cuda_fp32_matmul_tf32(bool tf32);

// Waits for the work queued on `device` to finish (a GPU runs operations after the host queued
// them): a phase's time then ends with its work, not with its queueing. Nothing on the CPU.
void synchronize_device(const std::string& device);

}  // namespace rlcpp
