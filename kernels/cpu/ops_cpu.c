/* The CPU op table. */
#include "kernels/ops.h"

const colo_ops colo_cpu_ops = {0};
