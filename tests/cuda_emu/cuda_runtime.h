/* cuda_emu: cuda_runtime.h = the runtime API plus, for kernel sources, the device side. */
#ifndef PK_EMU_CUDA_RUNTIME_H
#define PK_EMU_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "pk_emu_device.h"
#endif

#endif
