// CUDA's half precision types and functions.
#pragma once
#include "simt_cuda.h"
#include "simt_cuda_fp16.h"
