// One launch updates every parameter tensor of a model (multi-tensor SGD):
// blockIdx.y picks the tensor from a table of device pointers, the x-blocks
// stride over its elements.  Same arithmetic, in the same order, as
// tensorconv.nn.optim.SGD's NumPy path.  The learning rate is read from device memory
// when lr_device is given, so that a captured training step (tensorconv.nn.captured) follows
// a schedule without being captured again.
#include "tc_common.cuh"

extern "C" __global__ void sgd_multi_tensor(
    const unsigned long long* __restrict__ table,  // (T, 3): param, grad, velocity pointers
    const long long* __restrict__ sizes,           // (T,)
    float lr, const float* __restrict__ lr_device,                // lr_device: null, or (1,)
    float momentum, float weight_decay, int nesterov, int decoupled)
{
    tc::wait_prior_grids();
    if (lr_device != nullptr) lr = *lr_device;
    const int t = blockIdx.y;
    float* p = reinterpret_cast<float*>(table[3 * t]);
    const float* g = reinterpret_cast<const float*>(table[3 * t + 1]);
    float* v = reinterpret_cast<float*>(table[3 * t + 2]);
    const long long n = sizes[t];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
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
