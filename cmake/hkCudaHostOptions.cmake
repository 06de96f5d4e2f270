# hk_cuda_host_options_only(): the calling directory's inherited compile
# options (-Wall -Wextra -Werror, sanitizers) are the host C compiler's;
# this keeps them for C sources only, away from nvcc, which rejects them.
# Used by device/cuda and examples/train/cuda.
macro(hk_cuda_host_options_only)
  get_property(_hk_opts DIRECTORY PROPERTY COMPILE_OPTIONS)
  set(_hk_c_opts "")
  foreach(_o ${_hk_opts})
    list(APPEND _hk_c_opts "$<$<COMPILE_LANGUAGE:C>:${_o}>")
  endforeach()
  set_property(DIRECTORY PROPERTY COMPILE_OPTIONS ${_hk_c_opts})
endmacro()
