// An empty kernel: its launch time is the floor every tiny kernel pays
// (measured by tensorconv.bench.launch_floor, eagerly and inside a CUDA graph).
extern "C" __global__ void empty_kernel() {}
