// NCCL behind `Communicator`: the collectives and transfers of CUDA tensors between the GPUs of the
// ranks of a communicator, on each device's current stream. Neither NCCL nor LibTorch's CUDA part is
// linked into rlcpp (a run on the CPU maps neither, util/cuda_backend.h): the communicator lives in
// a plugin, librlcpp_nccl.so beside the program (src/cuda/), loaded when a run asks for one.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace rlcpp {

// A communicator over the ranks of `bootstrap` (MPI's, or one process's), each on CUDA device
// `device_index`: NCCL's unique id travels through `bootstrap`, which also carries bytes and host
// tensors (a tensor on the CPU given to a collective goes through it; CUDA tensors through NCCL).
// Throws a UserError that says why when the plugin, LibTorch's CUDA part, NCCL or the device is
// missing.
std::shared_ptr<Communicator> nccl_communicator(std::shared_ptr<Communicator> bootstrap, int device_index);

// The path the plugin is loaded from: $RLCPP_NCCL_PLUGIN, else librlcpp_nccl.so in the running
// program's folder.
std::string nccl_plugin_path();

}  // namespace rlcpp
