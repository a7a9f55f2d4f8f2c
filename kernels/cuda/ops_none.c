/* The CUDA op table of a build without CUDA: no slot filled.
 *
 * Such a build opens no CUDA device (runtime/registry.c), so kernels/ops.c
 * never hands this table out; it exists so that the dispatcher can name
 * colo_cuda_ops in every build. CMakeLists.txt compiles this file instead of
 * the .cu files when the CUDA backend is off. */
#include "kernels/ops.h"

const colo_ops colo_cuda_ops = {0};
