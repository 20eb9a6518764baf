/* CK(call): a CUDA runtime call that must succeed, for the tests and
 * benchmarks: on failure it prints where and why and exits. (The library
 * itself returns FATHOM_ERR_DEVICE instead: FATHOM_CUDA_TRY.) */
#ifndef FATHOM_CUDA_CHECK_CUH
#define FATHOM_CUDA_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
