// One launch updates every parameter tensor of a model (multi-tensor SGD): the grid is
// every tensor's chunks of `chunk` elements end to end, so the work spreads evenly over
// the blocks however unequal the tensors are (a 2.4 M-value 3x3 weight beside a 64-value
// batch-norm scale); a block finds its tensor by a binary search of the chunk table.  Same
// arithmetic, in the same order, as tensorconv.nn.optim.SGD's NumPy path.  The learning
// rate is read from device memory when lr_device is given, so that a captured training
// step (tensorconv.nn.captured) follows a schedule without being captured again.
#include "tc_common.cuh"

extern "C" __global__ void sgd_multi_tensor(
    const unsigned long long* __restrict__ table,  // (T, 3): param, grad, velocity pointers
    const long long* __restrict__ sizes,           // (T,)
    const int* __restrict__ chunk_start,           // (T + 1,): tensor t's first chunk, ascending
    int tensors, int chunk,   // chunk: elements a block updates, blockDim.x apart (coalesced)
    float lr, const float* __restrict__ lr_device,                // lr_device: null, or (1,)
    float momentum, float weight_decay, int nesterov, int decoupled)
{
    tc::wait_prior_grids();
    if (lr_device != nullptr) lr = *lr_device;
    const int b = blockIdx.x;
    int lo = 0, hi = tensors - 1;   // the last t with chunk_start[t] <= b
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (chunk_start[mid] <= b) lo = mid; else hi = mid - 1;
    }
    const int t = lo;
    float* p = reinterpret_cast<float*>(table[3 * t]);
    const float* g = reinterpret_cast<const float*>(table[3 * t + 1]);
    float* v = reinterpret_cast<float*>(table[3 * t + 2]);
    const long long first = (long long)(b - chunk_start[t]) * chunk;
    const long long end = min(sizes[t], first + chunk);
    for (long long i = first + threadIdx.x; i < end; i += blockDim.x) {
        float gi = g[i];
        const float pi = p[i];
        if (!decoupled) gi += weight_decay * pi;
        if (momentum != 0.f) {
            const float vi = v[i] * momentum + gi;
            v[i] = vi;
            gi = nesterov ? gi + momentum * vi : vi;
        }
        p[i] = (decoupled ? pi * (1.f - lr * weight_decay) : pi) - lr * gi;
    }
}
