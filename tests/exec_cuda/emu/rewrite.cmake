# rewrite.cmake — cmake -DIN=x.cu -DOUT=x.cpp -P rewrite.cmake: turns each CUDA launch
# `kernel<<<grid, block, smem, stream>>>(args)` of an exec/cuda source into
# `emu::launch(kernel, grid, block, smem, stream)(args)` for the CPU emulator (emu.h). exec/cuda
# writes every launch with its `<<<` and `>>>(` on one line, which is all this needs.
file(READ ${IN} src)
string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*(<[^;\n<>]*>)?)<<<([^\n]*)>>>\\("
       "emu::launch(\\1, \\3)(" src "${src}")
if(src MATCHES "<<<")
  message(FATAL_ERROR "${IN}: a launch this script cannot rewrite is left (keep <<< and >>>( on one line)")
endif()
file(WRITE ${OUT} "// generated from ${IN} by tests/exec_cuda/emu/rewrite.cmake: do not edit\n${src}")
