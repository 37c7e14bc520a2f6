# LibTorch: PyTorch's own, from the torch wheel pinned in scripts/requirements.txt, found through
# torch.utils.cmake_prefix_path of the Python that scripts/python_env.sh installs (RLCPP_PYTHON to
# name another). A LibTorch given by the user (Torch_DIR or CMAKE_PREFIX_PATH) is taken as it is,
# provided it is a 2.x release with the C++11 ABI. Anything else stops the configure with one message
# naming what was found, what is expected and the command that installs it.

file(STRINGS ${CMAKE_SOURCE_DIR}/scripts/requirements.txt _rlcpp_torch_pin REGEX "^torch==")
string(REGEX REPLACE "^torch==" "" RLCPP_TORCH_PINNED "${_rlcpp_torch_pin}")
set(_rlcpp_install "run `bash scripts/deps.sh` (it installs torch ${RLCPP_TORCH_PINNED} into rlcpp's own Python environment)")

if(NOT Torch_DIR AND NOT DEFINED ENV{Torch_DIR})
  if(NOT RLCPP_PYTHON)
    execute_process(COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/python_env.sh --python
                    OUTPUT_VARIABLE RLCPP_PYTHON OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
  set(RLCPP_PYTHON "${RLCPP_PYTHON}" CACHE FILEPATH "The Python of rlcpp's environment (torch, transformers, PEFT)")
  if(NOT EXISTS "${RLCPP_PYTHON}")
    message(FATAL_ERROR "LibTorch: no Python environment at ${RLCPP_PYTHON}.\n"
                        "rlcpp builds against the torch wheel ${RLCPP_TORCH_PINNED}: ${_rlcpp_install}, "
                        "or pass -DTorch_DIR=<libtorch>/share/cmake/Torch for a LibTorch of your own.")
  endif()
  execute_process(
    COMMAND "${RLCPP_PYTHON}" -c "import torch, torch.utils; print(torch.__version__.split('+')[0]); print(torch.utils.cmake_prefix_path); print(int(torch.compiled_with_cxx11_abi()))"
    OUTPUT_VARIABLE _rlcpp_torch_info ERROR_VARIABLE _rlcpp_torch_err RESULT_VARIABLE _rlcpp_torch_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rlcpp_torch_rc EQUAL 0)
    string(REGEX MATCH "[^\n]*\n?$" _rlcpp_last "${_rlcpp_torch_err}")
    message(FATAL_ERROR "LibTorch: `import torch` failed in ${RLCPP_PYTHON}: ${_rlcpp_last}\n"
                        "Expected torch ${RLCPP_TORCH_PINNED}: ${_rlcpp_install}.")
  endif()
  string(REPLACE "\n" ";" _rlcpp_torch_info "${_rlcpp_torch_info}")
  list(GET _rlcpp_torch_info 0 _rlcpp_found)
  list(GET _rlcpp_torch_info 1 _rlcpp_prefix)
  list(GET _rlcpp_torch_info 2 _rlcpp_abi)
  if(NOT _rlcpp_found VERSION_EQUAL RLCPP_TORCH_PINNED)
    message(FATAL_ERROR "LibTorch: found torch ${_rlcpp_found} in ${RLCPP_PYTHON}, expected ${RLCPP_TORCH_PINNED} "
                        "(scripts/requirements.txt): ${_rlcpp_install}.")
  endif()
  if(NOT _rlcpp_abi)
    message(FATAL_ERROR "LibTorch: torch ${_rlcpp_found} in ${RLCPP_PYTHON} was built with the pre-C++11 ABI, which "
                        "Debian's libraries (yaml-cpp, spdlog, GoogleTest) cannot link with: ${_rlcpp_install}.")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${_rlcpp_prefix}")
endif()

# The wheel's LibTorch is its CUDA build; its CMake config asks for the GPU architectures to compile
# for, and without a list it runs a probe on the GPU of the machine configuring (none here, and that
# probe does not configure under CMake 3.25). rlcpp compiles no CUDA code of its own yet.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "LibTorch: not found (Torch_DIR=${Torch_DIR}): ${_rlcpp_install}.")
endif()
if(Torch_VERSION AND Torch_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "LibTorch: found ${Torch_VERSION} at ${Torch_DIR}; rlcpp needs 2.x (tested with "
                      "${RLCPP_TORCH_PINNED}): ${_rlcpp_install}.")
endif()
if("${TORCH_CXX_FLAGS}" MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR "LibTorch at ${Torch_DIR} was built with the pre-C++11 ABI (${TORCH_CXX_FLAGS}), which Debian's "
                      "libraries cannot link with: ${_rlcpp_install}.")
endif()
# The wheel's CUDA libraries (NCCL, cuDNN, cuBLAS, ...) come as wheels of their own beside torch, and
# libtorch_cuda.so finds them at run time through its $ORIGIN-relative RPATH. The linker does not
# follow that RPATH for a library's own dependencies: it would take the system's (an older NCCL of
# the CUDA toolkit, say) and fail. So it is told where they are.
file(GLOB _rlcpp_wheel_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
foreach(dir ${_rlcpp_wheel_libs})
  add_link_options("LINKER:-rpath-link,${dir}")
endforeach()
# A run on the CPU maps LibTorch's CPU part alone: the libraries no symbol of rlcpp's needs (the CUDA
# part and its NVIDIA libraries) are left out of the programs' dependencies, and util/cuda_backend.h
# loads them when a run asks for a CUDA device.
# The wheel's config wraps libtorch_cuda.so and libtorch.so (which only depends on the CPU and CUDA
# parts) in --no-as-needed to force them in; those wrappers go, the compile settings they carry stay.
add_link_options("LINKER:--as-needed")
# libtorch.so itself is a shim that depends on both parts and defines a few libstdc++ symbols, which
# would make the linker keep it (and, through it, the CUDA part): the `torch` target names the CPU
# part instead.
get_target_property(_rlcpp_configs torch IMPORTED_CONFIGURATIONS)
foreach(config IN ITEMS "" ${_rlcpp_configs})
  set(_rlcpp_suffix "")
  if(config)
    set(_rlcpp_suffix "_${config}")
  endif()
  set_target_properties(torch PROPERTIES IMPORTED_LOCATION${_rlcpp_suffix} "${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so"
                                         IMPORTED_SONAME${_rlcpp_suffix} "libtorch_cpu.so")
endforeach()
foreach(wrapper torch_cuda_library torch_library)
  if(TARGET ${wrapper})
    get_target_property(_rlcpp_libs ${wrapper} INTERFACE_LINK_LIBRARIES)
    list(FILTER _rlcpp_libs EXCLUDE REGEX "^-Wl,--no-as-needed")
    set_target_properties(${wrapper} PROPERTIES INTERFACE_LINK_LIBRARIES "${_rlcpp_libs}")
  endif()
endforeach()
message(STATUS "LibTorch ${Torch_VERSION} at ${Torch_DIR}")
