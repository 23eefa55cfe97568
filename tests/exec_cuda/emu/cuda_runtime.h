/* cuda_runtime.h — the emulator's stand-in for the CUDA toolkit header of this name (see emu.h). */
#include "emu.h"
