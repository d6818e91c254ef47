// A training batch gathered from a dataset resident on the GPU, with the training loop's
// augmentation: a random crop of the image padded by `pad` (value `fill`) and a random
// horizontal flip (training/train.py: augment_batch, the same draws).
//
// One thread per output element (consecutive threads: consecutive columns of a row).  Output
// (n, c, y, x) reads padded row oy[n] + y and padded column ox[n] + x, or ox[n] + W - 1 - x
// when flip[n]: the source pixel (row - pad, col - pad) of image index[n], or `fill` outside
// it.  Without AUGMENT the rows are copied as they are.  The Python op
// (tensorconv/ops/augment.py) checks the arguments and sizes the grid.
#include "tc_common.cuh"

template <int AUGMENT>
__global__ void gather_augment(const float* __restrict__ images,  // (N, C, H, W)
                               const int* __restrict__ index,     // (B,) rows of images
                               const int* __restrict__ oy,        // (B,) crop offsets, 0..2pad
                               const int* __restrict__ ox,        // (B,)
                               const unsigned char* __restrict__ flip,  // (B,) 0 or 1
                               float* __restrict__ out,           // (B, C, H, W)
                               int B, int C, int H, int W, int pad, float fill)
{
    tc::wait_prior_grids();
    const size_t plane = (size_t)H * W, total = (size_t)B * C * plane;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(i % W), y = (int)((i / W) % H);
        const size_t nc = i / plane;
        const int n = (int)(nc / C), c = (int)(nc % C);
        const float* src = images + ((size_t)index[n] * C + c) * plane;
        if (!AUGMENT) {
            out[i] = src[(size_t)y * W + x];
            continue;
        }
        const int row = oy[n] + y - pad;
        const int col = (flip[n] ? ox[n] + W - 1 - x : ox[n] + x) - pad;
        out[i] = row >= 0 && row < H && col >= 0 && col < W ? src[(size_t)row * W + col] : fill;
    }
}

// What CI's nvcc build type-checks: tensorconv.ops.augment.instantiations()
#if !defined(__CUDACC_RTC__) && !defined(TC_SKIP_INSTANCES)
#define TC_I_GATHER_AUGMENT(...) template __global__ void gather_augment<__VA_ARGS__>( \
    const float*, const int*, const int*, const int*, const unsigned char*, float*, int, int, \
    int, int, int, float);
TC_I_GATHER_AUGMENT(0) TC_I_GATHER_AUGMENT(1)
#undef TC_I_GATHER_AUGMENT
#endif
