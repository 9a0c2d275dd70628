// nvcc includes this by itself; here the compiler driver includes simt_cuda.h first.
#pragma once
#include "simt_cuda.h"
