/* cublas_v2.h — the emulator's stand-in for the CUDA toolkit header of this name (see emu.h). */
#include "emu.h"
