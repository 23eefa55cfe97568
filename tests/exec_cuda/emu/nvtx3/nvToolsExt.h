/* nvToolsExt.h — the emulator's stand-in for NVTX 3 (see ../emu.h): ranges are no-ops. */
#ifndef PIPER_EMU_NVTX_H
#define PIPER_EMU_NVTX_H
inline int nvtxRangePushA(const char *name) { (void)name; return 0; }
inline int nvtxRangePop(void) { return 0; }
#endif
