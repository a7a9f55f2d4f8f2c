// The CUDA op table. Ops not yet written for CUDA are NULL: their
// dispatchers answer COLO_EUNSUPPORTED.
#include "kernels/ops.h"

extern "C" const colo_ops colo_cuda_ops = {};
