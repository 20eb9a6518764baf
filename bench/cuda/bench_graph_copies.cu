/* bench_graph_copies — can a CUDA graph drive the gather on the copy engines
 * with the plan chosen on the device?
 *
 * The gather kernel reads mapped host memory through the SMs, whose reads
 * top out near 51 GB/s while the copy engines reach the link rate (~55);
 * cudaMemcpyBatchAsync gets there but needs the run list on the host. Graph
 * conditional nodes are the one device-driven way to choose copy-engine
 * copies: one SWITCH node per (KV head, channel) whose body k copies the
 * first k+1 planes and the scales, its value set by a kernel from the plan.
 * This measures that against one large copy (the link rate) and the same
 * runs issued one by one with cudaMemcpyAsync from the host.
 *
 * Shapes: 1M tokens, 8 KV heads x 128 channels per layer, plans of 48 bits
 * (about 38 active channels a head, like fathom:48).
 *   usage: bench_graph_copies [layers]   (default 4; one graph holds
 *          layers x 1024 conditional nodes: instantiation time grows fast) */
#include "cuda/cuda_check.cuh"

#include <stdint.h>
#include <string.h>

enum { HEADS = 8, CHANNELS = 128, BLOCKS = 16384 /* 1M tokens */ };
static const size_t PLANE = BLOCKS * 8, SCALES = BLOCKS * 2, CHANNEL_BYTES = 4 * PLANE + SCALES;
static const int STORE_LAYERS = 4; /* distinct host layers the graph cycles through */

static __global__ void set_switches(const cudaGraphConditionalHandle *handles, const uint8_t *depths,
                                    int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    /* body t-1 copies t planes; a value past the last body runs none */
    if (i < count) cudaGraphSetConditional(handles[i], depths[i] ? depths[i] - 1u : 4u);
}

static float time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms;
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

int main(int argc, char **argv) {
    const int layers = argc > 1 ? atoi(argv[1]) : 4;
    if (layers < 1 || layers > 64) {
        fprintf(stderr, "layers: 1..64\n");
        return 2;
    }
    const size_t layer_bytes = (size_t)HEADS * CHANNELS * CHANNEL_BYTES;
    uint8_t *host, *stage;
    CK(cudaHostAlloc((void **)&host, layer_bytes * STORE_LAYERS, cudaHostAllocMapped));
    memset(host, 1, layer_bytes * STORE_LAYERS);
    CK(cudaMalloc(&stage, layer_bytes));
    /* plans: 48 planes a head spread at random over the channels */
    const size_t slots = (size_t)layers * HEADS * CHANNELS;
    uint8_t *depths = (uint8_t *)calloc(slots, 1);
    uint64_t rng = 0x9e3779b97f4a7c15ull, planned = 0;
    for (size_t g = 0; g < (size_t)layers * HEADS; g++) {
        uint8_t *t = depths + g * CHANNELS;
        for (int bits = 0; bits < 48;) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const int j = (int)((rng >> 33) % CHANNELS);
            if (t[j] < 4) t[j]++, bits++;
        }
        for (int j = 0; j < CHANNELS; j++)
            if (t[j]) planned += t[j] * PLANE + SCALES;
    }
    uint8_t *d_depths;
    CK(cudaMalloc(&d_depths, slots));
    CK(cudaMemcpy(d_depths, depths, slots, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));

    /* the link: one large copy */
    CK(cudaMemcpyAsync(stage, host, layer_bytes, cudaMemcpyHostToDevice, s));
    CK(cudaEventRecord(a, s));
    for (int r = 0; r < 3; r++)
        CK(cudaMemcpyAsync(stage, host + (r % STORE_LAYERS) * layer_bytes, layer_bytes,
                           cudaMemcpyHostToDevice, s));
    CK(cudaEventRecord(b, s));
    const double link = 3.0 * layer_bytes / time_ms(a, b) / 1e6;
    printf("link (3 x %.0f MB copies): %.1f GB/s\n", layer_bytes / 1e6, link);

    /* the graph: per layer a setter kernel, then one switch node per (head, channel) */
    cudaGraph_t graph;
    CK(cudaGraphCreate(&graph, 0));
    cudaGraphConditionalHandle *handles =
        (cudaGraphConditionalHandle *)malloc(slots * sizeof *handles), *d_handles;
    for (size_t i = 0; i < slots; i++) CK(cudaGraphConditionalHandleCreate(&handles[i], graph, 0, 0));
    CK(cudaMalloc(&d_handles, slots * sizeof *handles));
    CK(cudaMemcpy(d_handles, handles, slots * sizeof *handles, cudaMemcpyHostToDevice));
    cudaGraphNode_t prev = NULL;
    cudaGraphNode_t *ends = (cudaGraphNode_t *)malloc(HEADS * CHANNELS * sizeof *ends);
    for (int l = 0; l < layers; l++) {
        const cudaGraphConditionalHandle *h = d_handles + (size_t)l * HEADS * CHANNELS;
        const uint8_t *t = d_depths + (size_t)l * HEADS * CHANNELS;
        int count = HEADS * CHANNELS;
        void *kargs[] = {(void *)&h, (void *)&t, (void *)&count};
        cudaKernelNodeParams kp = {};
        kp.func = (void *)set_switches;
        kp.gridDim = dim3((count + 255) / 256);
        kp.blockDim = dim3(256);
        kp.kernelParams = kargs;
        cudaGraphNode_t setter;
        CK(cudaGraphAddKernelNode(&setter, graph, prev ? &prev : NULL, prev ? 1 : 0, &kp));
        const uint8_t *layer_host = host + (size_t)(l % STORE_LAYERS) * layer_bytes;
        for (int c = 0; c < HEADS * CHANNELS; c++) {
            cudaGraphNodeParams np = {};
            np.type = cudaGraphNodeTypeConditional;
            np.conditional.handle = handles[(size_t)l * HEADS * CHANNELS + c];
            np.conditional.type = cudaGraphCondTypeSwitch;
            np.conditional.size = 4;
            CK(cudaGraphAddNode(&ends[c], graph, &setter, NULL, 1, &np));
            const size_t off = (size_t)c * CHANNEL_BYTES;
            for (int k = 0; k < 4; k++) {
                cudaGraphNode_t planes, scales;
                CK(cudaGraphAddMemcpyNode1D(&planes, np.conditional.phGraph_out[k], NULL, 0, stage + off,
                                            layer_host + off, (k + 1) * PLANE, cudaMemcpyHostToDevice));
                CK(cudaGraphAddMemcpyNode1D(&scales, np.conditional.phGraph_out[k], NULL, 0,
                                            stage + off + 4 * PLANE, layer_host + off + 4 * PLANE, SCALES,
                                            cudaMemcpyHostToDevice));
            }
        }
        CK(cudaGraphAddEmptyNode(&prev, graph, ends, HEADS * CHANNELS));
    }
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(b, s));
        const float ms = time_ms(a, b);
        if (ms < best) best = ms;
    }
    /* every planned plane and scale landed */
    uint8_t *back = (uint8_t *)malloc(layer_bytes);
    CK(cudaMemset(stage, 0, layer_bytes));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaMemcpy(back, stage, layer_bytes, cudaMemcpyDeviceToHost));
    const uint8_t *t_last = depths + (size_t)(layers - 1) * HEADS * CHANNELS;
    size_t wrong = 0;
    for (int c = 0; c < HEADS * CHANNELS; c++)
        for (int k = 0; k < t_last[c]; k++) wrong += back[(size_t)c * CHANNEL_BYTES + k * PLANE] != 1;
    printf("conditional copies: %d layers, %zu switch nodes: %.3f ms, %.1f MB -> %.1f GB/s "
           "(%.0f us a layer; %zu planes missing)\n",
           layers, slots, best, planned / 1e6, planned / best / 1e6, best * 1e3 / layers, wrong);

    /* the same runs from the host, one cudaMemcpyAsync each */
    CK(cudaEventRecord(a, s));
    for (int l = 0; l < layers; l++) {
        const uint8_t *layer_host = host + (size_t)(l % STORE_LAYERS) * layer_bytes;
        for (int c = 0; c < HEADS * CHANNELS; c++) {
            const int t = depths[(size_t)l * HEADS * CHANNELS + c];
            if (!t) continue;
            const size_t off = (size_t)c * CHANNEL_BYTES;
            CK(cudaMemcpyAsync(stage + off, layer_host + off, t * PLANE, cudaMemcpyHostToDevice, s));
            CK(cudaMemcpyAsync(stage + off + 4 * PLANE, layer_host + off + 4 * PLANE, SCALES,
                               cudaMemcpyHostToDevice, s));
        }
    }
    CK(cudaEventRecord(b, s));
    const float host_ms = time_ms(a, b);
    printf("host-issued cudaMemcpyAsync per run: %.3f ms -> %.1f GB/s\n", host_ms, planned / host_ms / 1e6);
    printf("conditional / link: %.2f; host-issued / link: %.2f\n", planned / best / 1e6 / link,
           planned / host_ms / 1e6 / link);
    free(back);
    free(ends);
    free(handles);
    free(depths);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    return 0;
}
