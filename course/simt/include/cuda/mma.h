// CUDA's warp matrix functions (nvcuda::wmma); like nvcc's, this brings <cuda_fp16.h> along.
#pragma once
#include "simt_cuda.h"
#include "simt_cuda_fp16.h"
#include "simt_cuda_wmma.h"
