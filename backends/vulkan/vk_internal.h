/* Internal to the Vulkan backend: the per-backend context, memory sub-allocation, command
 * batching and the pipeline table shared by vk_backend.c, vk_error.c, vk_memory.c, vk_exec.c and
 * vk_ops.c.
 *
 * Execution model. Work is recorded into a command buffer ("batch") and submitted when a
 * result is needed on the host (download, synchronize, reductions) or when the batch holds
 * DPT_VK_BATCH_DISPATCHES commands. Two frames (command buffer + fence + descriptor pool) rotate
 * so the host records batch i+1 while the device runs batch i. Every batch gets a serial number;
 * every sub-allocation remembers the serial of the last batch that used it (last_use), so a host
 * access waits only when that batch is still pending. Between any two recorded commands there is
 * one conservative global memory barrier (compute|transfer writes -> compute|transfer
 * reads/writes), the same at the start of a batch for ordering against the previous batch, and
 * a barrier to the host at its end.
 *
 * Memory model. Device memory comes in blocks of block_size bytes, each with one VkBuffer over
 * the whole block; a tensor is an aligned range in a block (first fit, coalescing free list).
 * Buffers of at least dedicated_min bytes get their own block. Where the device offers
 * host-visible device-local memory (lavapipe, integrated GPUs), blocks are mapped and idle
 * buffers are read and written with memcpy ("direct" mode); otherwise, and for an upload into
 * a buffer that pending work still uses, transfers go through a host-visible staging buffer
 * with copies recorded into the command stream. A freed range whose batch is pending is only
 * reused once that batch completed (deferred release).
 *
 * Shaders see a tensor through a "window": the descriptor binds [start, end) of its block where
 * start is the tensor's byte offset rounded down to minStorageBufferOffsetAlignment, and the
 * remaining element offset (< alignment) travels in the push constants. Windows are limited to
 * maxStorageBufferRange (128 MiB on lavapipe), which is why a window covers the tensor rather
 * than the whole sub-allocation; element-wise ops, reductions, gemm, the embedding bags (tables
 * in row chunks) and several layer ops split larger tensors into several dispatches, the other
 * ops return DPT_ERR_UNSUPPORTED.
 *
 * gemm has three kernels: gemm.comp (64 x 64 tiles, 8 x 8 outputs per invocation; GPUs),
 * gemm_tex.comp (A and B as uniform texel buffers, 16 x 64 tiles, no shared memory; CPU drivers
 * with shaderFloat64, where a storage-buffer load is a loop over the SIMD lanes but a texel
 * fetch is a gather) and gemm_cpu.comp (128 x 128 tiles, dvec4-packed shared memory; the CPU
 * drivers' kernel where an operand cannot be a texel view).
 */
#ifndef DPTRAIN_VK_INTERNAL_H
#define DPTRAIN_VK_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <vulkan/vulkan.h>

#include "backends/backend_impl.h"

enum {
  DPT_VK_FRAMES = 2,
  DPT_VK_MAX_BINDINGS = 8,       /* where the device allows (maxPerStageDescriptorStorageBuffers) */
  DPT_VK_BATCH_DISPATCHES = 128, /* commands per batch before it is submitted */
  DPT_VK_PUSH_BYTES = 128,       /* the minimum maxPushConstantsSize every device offers */
  DPT_VK_WG = 256,               /* invocations per workgroup of the 1-D shaders */
  /* Loop iterations one invocation may run in all: llvmpipe (lavapipe) counts the iterations
   * of every loop of an invocation against one budget of 65535 and silently leaves loops once
   * it is spent, so long-running shaders split their work into several dispatches. */
  DPT_VK_LOOP_LIMIT = 32768,
  DPT_VK_TEX_LAYOUTS = 3 /* binding layouts with uniform texel buffers (vk_exec.c) */
};

/* The pipelines: X(ID, spv file, storage buffer bindings, specialization constants 0..3).
 * GEMM_<i>: gemm.spv, i = trans_a + 2 trans_b + 4 vec_a + 8 vec_b (vec: may read as vec4).
 * GEMM_CPU_<i>: gemm_cpu.spv, i = trans_a + 2 trans_b + 4 vec_a + 12 vec_b (vec 0..2);
 * GEMM_CPU64_<i>: the same for gemm_cpu64.spv (64-row tiles).
 * GEMM_TEX_<i>: gemm_tex.spv, i = trans_a + 2 trans_b + 4 vec_a + 8 vec_b (vec: RGBA32F view,
 * else R32F); bindings 0 and 1 are uniform texel buffers (vk_exec.c creates the views). */
#define DPT_VK_PIPE_MAP(X)                                                                         \
  X(GEMM_0, "gemm.spv", 3, 0, 0, 0, 0)                                                             \
  X(GEMM_1, "gemm.spv", 3, 1, 0, 0, 0)                                                             \
  X(GEMM_2, "gemm.spv", 3, 0, 1, 0, 0)                                                             \
  X(GEMM_3, "gemm.spv", 3, 1, 1, 0, 0)                                                             \
  X(GEMM_4, "gemm.spv", 3, 0, 0, 1, 0)                                                             \
  X(GEMM_5, "gemm.spv", 3, 1, 0, 1, 0)                                                             \
  X(GEMM_6, "gemm.spv", 3, 0, 1, 1, 0)                                                             \
  X(GEMM_7, "gemm.spv", 3, 1, 1, 1, 0)                                                             \
  X(GEMM_8, "gemm.spv", 3, 0, 0, 0, 1)                                                             \
  X(GEMM_9, "gemm.spv", 3, 1, 0, 0, 1)                                                             \
  X(GEMM_10, "gemm.spv", 3, 0, 1, 0, 1)                                                            \
  X(GEMM_11, "gemm.spv", 3, 1, 1, 0, 1)                                                            \
  X(GEMM_12, "gemm.spv", 3, 0, 0, 1, 1)                                                            \
  X(GEMM_13, "gemm.spv", 3, 1, 0, 1, 1)                                                            \
  X(GEMM_14, "gemm.spv", 3, 0, 1, 1, 1)                                                            \
  X(GEMM_15, "gemm.spv", 3, 1, 1, 1, 1)                                                            \
  X(GEMM_CPU_0, "gemm_cpu.spv", 3, 0, 0, 0, 0)                                                     \
  X(GEMM_CPU_1, "gemm_cpu.spv", 3, 1, 0, 0, 0)                                                     \
  X(GEMM_CPU_2, "gemm_cpu.spv", 3, 0, 1, 0, 0)                                                     \
  X(GEMM_CPU_3, "gemm_cpu.spv", 3, 1, 1, 0, 0)                                                     \
  X(GEMM_CPU_4, "gemm_cpu.spv", 3, 0, 0, 1, 0)                                                     \
  X(GEMM_CPU_5, "gemm_cpu.spv", 3, 1, 0, 1, 0)                                                     \
  X(GEMM_CPU_6, "gemm_cpu.spv", 3, 0, 1, 1, 0)                                                     \
  X(GEMM_CPU_7, "gemm_cpu.spv", 3, 1, 1, 1, 0)                                                     \
  X(GEMM_CPU_8, "gemm_cpu.spv", 3, 0, 0, 2, 0)                                                     \
  X(GEMM_CPU_9, "gemm_cpu.spv", 3, 1, 0, 2, 0)                                                     \
  X(GEMM_CPU_10, "gemm_cpu.spv", 3, 0, 1, 2, 0)                                                    \
  X(GEMM_CPU_11, "gemm_cpu.spv", 3, 1, 1, 2, 0)                                                    \
  X(GEMM_CPU_12, "gemm_cpu.spv", 3, 0, 0, 0, 1)                                                    \
  X(GEMM_CPU_13, "gemm_cpu.spv", 3, 1, 0, 0, 1)                                                    \
  X(GEMM_CPU_14, "gemm_cpu.spv", 3, 0, 1, 0, 1)                                                    \
  X(GEMM_CPU_15, "gemm_cpu.spv", 3, 1, 1, 0, 1)                                                    \
  X(GEMM_CPU_16, "gemm_cpu.spv", 3, 0, 0, 1, 1)                                                    \
  X(GEMM_CPU_17, "gemm_cpu.spv", 3, 1, 0, 1, 1)                                                    \
  X(GEMM_CPU_18, "gemm_cpu.spv", 3, 0, 1, 1, 1)                                                    \
  X(GEMM_CPU_19, "gemm_cpu.spv", 3, 1, 1, 1, 1)                                                    \
  X(GEMM_CPU_20, "gemm_cpu.spv", 3, 0, 0, 2, 1)                                                    \
  X(GEMM_CPU_21, "gemm_cpu.spv", 3, 1, 0, 2, 1)                                                    \
  X(GEMM_CPU_22, "gemm_cpu.spv", 3, 0, 1, 2, 1)                                                    \
  X(GEMM_CPU_23, "gemm_cpu.spv", 3, 1, 1, 2, 1)                                                    \
  X(GEMM_CPU_24, "gemm_cpu.spv", 3, 0, 0, 0, 2)                                                    \
  X(GEMM_CPU_25, "gemm_cpu.spv", 3, 1, 0, 0, 2)                                                    \
  X(GEMM_CPU_26, "gemm_cpu.spv", 3, 0, 1, 0, 2)                                                    \
  X(GEMM_CPU_27, "gemm_cpu.spv", 3, 1, 1, 0, 2)                                                    \
  X(GEMM_CPU_28, "gemm_cpu.spv", 3, 0, 0, 1, 2)                                                    \
  X(GEMM_CPU_29, "gemm_cpu.spv", 3, 1, 0, 1, 2)                                                    \
  X(GEMM_CPU_30, "gemm_cpu.spv", 3, 0, 1, 1, 2)                                                    \
  X(GEMM_CPU_31, "gemm_cpu.spv", 3, 1, 1, 1, 2)                                                    \
  X(GEMM_CPU_32, "gemm_cpu.spv", 3, 0, 0, 2, 2)                                                    \
  X(GEMM_CPU_33, "gemm_cpu.spv", 3, 1, 0, 2, 2)                                                    \
  X(GEMM_CPU_34, "gemm_cpu.spv", 3, 0, 1, 2, 2)                                                    \
  X(GEMM_CPU_35, "gemm_cpu.spv", 3, 1, 1, 2, 2)                                                    \
  X(GEMM_CPU64_0, "gemm_cpu64.spv", 3, 0, 0, 0, 0)                                                 \
  X(GEMM_CPU64_1, "gemm_cpu64.spv", 3, 1, 0, 0, 0)                                                 \
  X(GEMM_CPU64_2, "gemm_cpu64.spv", 3, 0, 1, 0, 0)                                                 \
  X(GEMM_CPU64_3, "gemm_cpu64.spv", 3, 1, 1, 0, 0)                                                 \
  X(GEMM_CPU64_4, "gemm_cpu64.spv", 3, 0, 0, 1, 0)                                                 \
  X(GEMM_CPU64_5, "gemm_cpu64.spv", 3, 1, 0, 1, 0)                                                 \
  X(GEMM_CPU64_6, "gemm_cpu64.spv", 3, 0, 1, 1, 0)                                                 \
  X(GEMM_CPU64_7, "gemm_cpu64.spv", 3, 1, 1, 1, 0)                                                 \
  X(GEMM_CPU64_8, "gemm_cpu64.spv", 3, 0, 0, 2, 0)                                                 \
  X(GEMM_CPU64_9, "gemm_cpu64.spv", 3, 1, 0, 2, 0)                                                 \
  X(GEMM_CPU64_10, "gemm_cpu64.spv", 3, 0, 1, 2, 0)                                                \
  X(GEMM_CPU64_11, "gemm_cpu64.spv", 3, 1, 1, 2, 0)                                                \
  X(GEMM_CPU64_12, "gemm_cpu64.spv", 3, 0, 0, 0, 1)                                                \
  X(GEMM_CPU64_13, "gemm_cpu64.spv", 3, 1, 0, 0, 1)                                                \
  X(GEMM_CPU64_14, "gemm_cpu64.spv", 3, 0, 1, 0, 1)                                                \
  X(GEMM_CPU64_15, "gemm_cpu64.spv", 3, 1, 1, 0, 1)                                                \
  X(GEMM_CPU64_16, "gemm_cpu64.spv", 3, 0, 0, 1, 1)                                                \
  X(GEMM_CPU64_17, "gemm_cpu64.spv", 3, 1, 0, 1, 1)                                                \
  X(GEMM_CPU64_18, "gemm_cpu64.spv", 3, 0, 1, 1, 1)                                                \
  X(GEMM_CPU64_19, "gemm_cpu64.spv", 3, 1, 1, 1, 1)                                                \
  X(GEMM_CPU64_20, "gemm_cpu64.spv", 3, 0, 0, 2, 1)                                                \
  X(GEMM_CPU64_21, "gemm_cpu64.spv", 3, 1, 0, 2, 1)                                                \
  X(GEMM_CPU64_22, "gemm_cpu64.spv", 3, 0, 1, 2, 1)                                                \
  X(GEMM_CPU64_23, "gemm_cpu64.spv", 3, 1, 1, 2, 1)                                                \
  X(GEMM_CPU64_24, "gemm_cpu64.spv", 3, 0, 0, 0, 2)                                                \
  X(GEMM_CPU64_25, "gemm_cpu64.spv", 3, 1, 0, 0, 2)                                                \
  X(GEMM_CPU64_26, "gemm_cpu64.spv", 3, 0, 1, 0, 2)                                                \
  X(GEMM_CPU64_27, "gemm_cpu64.spv", 3, 1, 1, 0, 2)                                                \
  X(GEMM_CPU64_28, "gemm_cpu64.spv", 3, 0, 0, 1, 2)                                                \
  X(GEMM_CPU64_29, "gemm_cpu64.spv", 3, 1, 0, 1, 2)                                                \
  X(GEMM_CPU64_30, "gemm_cpu64.spv", 3, 0, 1, 1, 2)                                                \
  X(GEMM_CPU64_31, "gemm_cpu64.spv", 3, 1, 1, 1, 2)                                                \
  X(GEMM_CPU64_32, "gemm_cpu64.spv", 3, 0, 0, 2, 2)                                                \
  X(GEMM_CPU64_33, "gemm_cpu64.spv", 3, 1, 0, 2, 2)                                                \
  X(GEMM_CPU64_34, "gemm_cpu64.spv", 3, 0, 1, 2, 2)                                                \
  X(GEMM_CPU64_35, "gemm_cpu64.spv", 3, 1, 1, 2, 2)                                                \
  X(BIAS_ADD, "bias_add.spv", 2, 0, 0, 0, 0)                                                       \
  X(BIAS_GRAD, "bias_grad.spv", 2, 0, 0, 0, 0)                                                     \
  X(RELU_FWD, "relu_fwd.spv", 2, 0, 0, 0, 0)                                                       \
  X(ADD_RELU, "add_relu.spv", 3, 0, 0, 0, 0)                                                       \
  X(RELU_BWD, "relu_bwd.spv", 3, 0, 0, 0, 0)                                                       \
  X(SOFTMAX_XENT, "softmax_xent.spv", 4, 0, 0, 0, 0)                                               \
  X(IM2COL, "im2col.spv", 2, 0, 0, 0, 0)                                                           \
  X(COL2IM, "col2im.spv", 2, 0, 0, 0, 0)                                                           \
  X(MAXPOOL_FWD, "maxpool_fwd.spv", 3, 0, 0, 0, 0)                                                 \
  X(MAXPOOL_BWD, "maxpool_bwd.spv", 3, 0, 0, 0, 0)                                                 \
  X(EMBED_GATHER, "embed_gather.spv", 3, 0, 0, 0, 0)                                               \
  X(EMBED_LINKS, "embed_links.spv", 2, 0, 0, 0, 0)                                                 \
  X(EMBED_SCATTER_ADD, "embed_scatter_add.spv", 4, 0, 0, 0, 0)                                     \
  X(AXPY, "axpy.spv", 2, 0, 0, 0, 0)                                                               \
  X(SCALE, "scale.spv", 1, 0, 0, 0, 0)                                                             \
  X(SUM, "reduce.spv", 2, 0, 0, 0, 0)                                                              \
  X(SUMSQ, "reduce.spv", 2, 1, 0, 0, 0)                                                            \
  X(COUNT_NONFINITE, "count_nonfinite.spv", 2, 0, 0, 0, 0)                                         \
  X(SGD_UPDATE, "sgd_update.spv", 3, 0, 0, 0, 0)                                                   \
  X(ADAMW_UPDATE, "adamw_update.spv", 4, 0, 0, 0, 0)                                               \
  X(F32_TO_F16, "f32_to_f16.spv", 2, 0, 0, 0, 0)                                                   \
  X(F16_TO_F32, "f16_to_f32.spv", 2, 0, 0, 0, 0)                                                   \
  X(F32_TO_BF16, "f32_to_bf16.spv", 2, 0, 0, 0, 0)                                                 \
  X(BF16_TO_F32, "bf16_to_f32.spv", 2, 0, 0, 0, 0)                                                 \
  X(GEMM_SMALL_0, "gemm_small.spv", 3, 0, 0, 0, 0)                                                 \
  X(GEMM_SMALL_1, "gemm_small.spv", 3, 1, 0, 0, 0)                                                 \
  X(GEMM_SMALL_2, "gemm_small.spv", 3, 0, 1, 0, 0)                                                 \
  X(GEMM_SMALL_3, "gemm_small.spv", 3, 1, 1, 0, 0)                                                 \
  X(GEMM_TEX_0, "gemm_tex.spv", 3, 0, 0, 0, 0)                                                     \
  X(GEMM_TEX_1, "gemm_tex.spv", 3, 1, 0, 0, 0)                                                     \
  X(GEMM_TEX_2, "gemm_tex.spv", 3, 0, 1, 0, 0)                                                     \
  X(GEMM_TEX_3, "gemm_tex.spv", 3, 1, 1, 0, 0)                                                     \
  X(GEMM_TEX_4, "gemm_tex.spv", 3, 0, 0, 1, 0)                                                     \
  X(GEMM_TEX_5, "gemm_tex.spv", 3, 1, 0, 1, 0)                                                     \
  X(GEMM_TEX_6, "gemm_tex.spv", 3, 0, 1, 1, 0)                                                     \
  X(GEMM_TEX_7, "gemm_tex.spv", 3, 1, 1, 1, 0)                                                     \
  X(GEMM_TEX_8, "gemm_tex.spv", 3, 0, 0, 0, 1)                                                     \
  X(GEMM_TEX_9, "gemm_tex.spv", 3, 1, 0, 0, 1)                                                     \
  X(GEMM_TEX_10, "gemm_tex.spv", 3, 0, 1, 0, 1)                                                    \
  X(GEMM_TEX_11, "gemm_tex.spv", 3, 1, 1, 0, 1)                                                    \
  X(GEMM_TEX_12, "gemm_tex.spv", 3, 0, 0, 1, 1)                                                    \
  X(GEMM_TEX_13, "gemm_tex.spv", 3, 1, 0, 1, 1)                                                    \
  X(GEMM_TEX_14, "gemm_tex.spv", 3, 0, 1, 1, 1)                                                    \
  X(GEMM_TEX_15, "gemm_tex.spv", 3, 1, 1, 1, 1)                                                    \
  X(BN_STATS, "bn_stats.spv", 3, 0, 0, 0, 0)                                                       \
  X(BN_FWD, "bn_fwd.spv", 6, 0, 0, 0, 0)                                                           \
  X(BN_BWD_REDUCE, "bn_bwd_reduce.spv", 7, 0, 0, 0, 0)                                             \
  X(BN_BWD, "bn_bwd.spv", 8, 0, 0, 0, 0)                                                           \
  X(AVGPOOL_FWD, "avgpool_fwd.spv", 2, 0, 0, 0, 0)                                                 \
  X(AVGPOOL_BWD, "avgpool_bwd.spv", 2, 0, 0, 0, 0)                                                 \
  X(DROPOUT, "dropout.spv", 2, 0, 0, 0, 0)                                                         \
  X(LAYERNORM_FWD, "layernorm_fwd.spv", 6, 0, 0, 0, 0)                                             \
  X(LAYERNORM_BWD, "layernorm_bwd.spv", 6, 0, 0, 0, 0)                                             \
  X(LAYERNORM_BWD_PARAMS, "layernorm_bwd_params.spv", 6, 0, 0, 0, 0)                               \
  X(GELU_FWD, "gelu_fwd.spv", 2, 0, 0, 0, 0)                                                       \
  X(GELU_BWD, "gelu_bwd.spv", 3, 0, 0, 0, 0)                                                       \
  X(BIAS_GELU_FWD, "bias_gelu_fwd.spv", 3, 0, 0, 0, 0)                                             \
  X(BIAS_GELU_BWD, "bias_gelu_bwd.spv", 4, 0, 0, 0, 0)                                             \
  X(ATTN_SOFTMAX, "attn_softmax.spv", 3, 0, 0, 0, 0)                                               \
  X(SOFTMAX_BWD, "softmax_bwd.spv", 3, 0, 0, 0, 0)                                                 \
  X(EMBED_BAG, "embed_bag.spv", 3, 0, 0, 0, 0)                                                     \
  X(EMBED_BAG_BWD, "embed_bag_bwd.spv", 3, 0, 0, 0, 0)                                             \
  X(EMBED_BAG_GATHER, "embed_bag_gather.spv", 3, 0, 0, 0, 0)                                       \
  X(GATHER_COLS, "gather_cols.spv", 3, 0, 0, 0, 0)                                                 \
  X(SCATTER_COLS_ADD, "gather_cols.spv", 3, 1, 0, 0, 0)                                            \
  X(BCE_LOGITS, "bce_logits.spv", 4, 0, 0, 0, 0)                                                   \
  X(RELU_FWD_TEX, "relu_fwd_tex.spv", 2, 0, 0, 0, 0)                                               \
  X(RELU_BWD_TEX, "relu_bwd_tex.spv", 3, 0, 0, 0, 0)                                               \
  X(IM2COL_TEX, "im2col_tex.spv", 2, 0, 0, 0, 0)                                                   \
  X(COL2IM_TEX, "col2im_tex.spv", 2, 0, 0, 0, 0)                                                   \
  X(MAXPOOL_FWD_TEX, "maxpool_fwd_tex.spv", 3, 0, 0, 0, 0)                                         \
  X(MAXPOOL_BWD_TEX, "maxpool_bwd_tex.spv", 3, 0, 0, 0, 0)                                         \
  X(ATTN_PROBS_FWD, "attn_probs_fwd.spv", 3, 0, 0, 0, 0)                                           \
  X(ATTN_PROBS_BWD, "attn_probs_bwd.spv", 4, 0, 0, 0, 0)

typedef enum dpt_vk_pipe {
#define DPT_VK_PIPE_ENUM_(id, file, nbind, s0, s1, s2, s3) DPT_VK_PIPE_##id,
  DPT_VK_PIPE_MAP(DPT_VK_PIPE_ENUM_)
#undef DPT_VK_PIPE_ENUM_
      DPT_VK_PIPE_COUNT
} dpt_vk_pipe;

/* Which memory a block lives in. */
typedef enum dpt_vk_memkind {
  DPT_VK_MEM_DEVICE = 0, /* tensors: device-local (mapped in direct mode) */
  DPT_VK_MEM_HOST = 1    /* staging and reduction partials: host-visible, coherent */
} dpt_vk_memkind;

typedef struct dpt_vk_range {
  VkDeviceSize offset, size; /* bytes within the block */
} dpt_vk_range;

typedef struct dpt_vk_block {
  VkDeviceMemory memory;
  VkBuffer buffer;   /* spans the whole block */
  VkDeviceSize size; /* bytes */
  uint8_t *map;      /* persistent mapping of the whole block, NULL when not host-visible */
  dpt_vk_memkind kind;
  int dedicated;      /* one allocation only; released with it */
  dpt_vk_range *free; /* free ranges sorted by offset, coalesced; owned */
  size_t nfree, capfree;
  size_t nlive; /* sub-allocations currently handed out */
  int budgeted; /* counted in the context's device_bytes */
  struct dpt_vk_block *next;
} dpt_vk_block;

/* One sub-allocation: what dpt_buffer.handle points to, and the backend's own scratch. */
typedef struct dpt_vk_alloc {
  dpt_vk_block *block;
  VkDeviceSize offset; /* bytes from the start of the block, aligned */
  VkDeviceSize size;   /* bytes reserved (the request rounded up to 4) */
  uint64_t last_use;   /* serial of the last batch that recorded a command on it, 0 = none */
} dpt_vk_alloc;

typedef struct dpt_vk_deferred {
  dpt_vk_alloc *alloc; /* owned until released */
  uint64_t serial;     /* release once this batch completed */
} dpt_vk_deferred;

typedef enum dpt_vk_frame_state {
  DPT_VK_FRAME_IDLE = 0,
  DPT_VK_FRAME_RECORDING,
  DPT_VK_FRAME_SUBMITTED
} dpt_vk_frame_state;

typedef struct dpt_vk_frame {
  VkCommandPool pool;
  VkCommandBuffer cmd;
  VkFence fence;
  VkDescriptorPool descriptors; /* DPT_VK_BATCH_DISPATCHES sets, reset with the frame */
  uint64_t serial;              /* batch recorded or running in this frame */
  dpt_vk_frame_state state;
  uint32_t ncmds;                                  /* commands recorded into the current batch */
  VkBufferView views[2 * DPT_VK_BATCH_DISPATCHES]; /* texel views of the batch's dispatches */
  uint32_t nviews;
} dpt_vk_frame;

/* A tensor as a shader sees it (see the header comment). */
typedef struct dpt_vk_win {
  dpt_vk_alloc *alloc;
  VkDeviceSize offset; /* bytes from the start of the block, aligned for descriptors */
  VkDeviceSize range;  /* bytes bound */
  uint32_t elem;       /* element offset of the tensor inside the window */
} dpt_vk_win;

typedef struct dpt_vk_ctx {
  dpt_backend *be; /* back pointer, for be->lost */

  /* validation (DPT_VULKAN_VALIDATION=1): written by the messenger callback */
  int validation;
  atomic_uint_fast64_t validation_errors;
  atomic_int validation_pending; /* an error not yet returned by an op */
  char validation_msg[1024];     /* the first unreported error message */

  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
  VkPhysicalDevice phys;
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties memprops;
  VkDeviceSize max_allocation; /* maxMemoryAllocationSize */
  VkDevice device;
  VkQueue queue;
  uint32_t queue_family;

  int gemm_cpu; /* gemm_cpu.spv (CPU driver with shaderFloat64) instead of gemm.spv */
  int gemm_tex; /* gemm_tex.spv and the *_tex.spv variants where operands allow (CPU driver,
                 * texel buffers usable) */
  int tex_sint; /* R32_SINT uniform texel buffers usable (maxpool_bwd_tex.spv's argmax) */

  /* test knobs from the environment (vulkan_debug.h), read once at creation */
  int force_staging; /* DPT_VULKAN_FORCE_STAGING=1: no direct mode */
  int portable;      /* DPT_VULKAN_PORTABLE=1: gemm.spv even on a CPU driver */
  int no_tex;        /* DPT_VULKAN_NO_TEX=1: the CPU-driver ops without gemm_tex.spv, *_tex.spv */
  uint32_t test_max_range; /* DPT_VULKAN_TEST_MAX_RANGE in bytes; 0 when unset */

  /* memory */
  int direct;          /* device memory is host-visible: mapped, memcpy when idle */
  uint32_t memtype[2]; /* indexed by dpt_vk_memkind */
  VkDeviceSize align;  /* sub-allocation alignment (>= minStorageBufferOffsetAlignment) */
  VkDeviceSize block_size, dedicated_min;
  /* Device-memory blocks beyond test_budget bytes in all fail as out of memory (0, the
   * default: no budget): tests set it to reach the out-of-memory paths. */
  VkDeviceSize test_budget, device_bytes;
  dpt_vk_block *blocks;
  dpt_vk_deferred *deferred; /* frees waiting for their batch; owned */
  size_t ndeferred, capdeferred;
  dpt_vk_alloc *staging; /* host memory for transfers, NULL until needed */
  /* Host copies of fenced ranges without direct mode (vk_memory.c, the fenced transfers),
   * kept for reuse once their fence is freed. */
  dpt_vk_alloc *snapshots[4];
  int nsnapshots;
  VkDeviceSize staging_cursor;
  uint64_t staging_serial; /* last batch reading/writing the staging buffer */
  dpt_vk_alloc *partials;  /* host memory for per-workgroup partial results */
  dpt_vk_alloc *scratch;   /* device memory for multi-pass ops */

  /* execution */
  dpt_vk_frame frames[DPT_VK_FRAMES];
  int recording;        /* index of the frame being recorded, -1 when none */
  int last_frame;       /* frame that received the last batch */
  uint64_t next_serial; /* serial of the next batch */
  uint64_t completed;   /* every batch with a serial <= completed has finished */
  VkPipelineCache cache;
  VkDescriptorSetLayout set_layout[DPT_VK_MAX_BINDINGS + 1]; /* by binding count */
  VkPipelineLayout pipe_layout[DPT_VK_MAX_BINDINGS + 1];
  /* pipelines reading some bindings as uniform texel buffers (gemm_tex.spv, the *_tex.spv
   * variants), one layout per combination (vk_exec.c) */
  VkDescriptorSetLayout tex_set_layout[DPT_VK_TEX_LAYOUTS];
  VkPipelineLayout tex_pipe_layout[DPT_VK_TEX_LAYOUTS];
  VkPipeline pipes[DPT_VK_PIPE_COUNT]; /* created on first use */
} dpt_vk_ctx;

static inline dpt_vk_ctx *dpt_vk_ctx_of(dpt_backend *be) {
  return (dpt_vk_ctx *)be->ctx;
}

/* ---- errors (vk_error.c) ---------------------------------------------------------------- */
/* The name of a VkResult ("VK_ERROR_DEVICE_LOST"). */
const char *dpt_vk_result_name(VkResult r);
/* Translates a failed call: DPT_OK for VK_SUCCESS, else sets the error "call: NAME (n)";
 * out-of-memory results give DPT_ERR_OUT_OF_MEMORY (with `bytes` when non-zero), device loss
 * DPT_ERR_DEVICE and marks the backend lost. ctx may be NULL (enumeration). */
dpt_status dpt_vk_check(dpt_vk_ctx *ctx, VkResult r, const char *call, size_t bytes);
/* Returns (and clears) a validation error no call has reported yet: DPT_ERR_DEVICE with the
 * layer's message. DPT_OK for a NULL ctx or when none is pending. */
dpt_status dpt_vk_validation_status(dpt_vk_ctx *ctx);
/* The guard around every vtable entry that works on the device: dpt_vk_enter refuses work on a
 * lost device and reports a validation error raised since the last call; dpt_vk_leave(st)
 * passes a failure through and otherwise reports one the call itself raised. */
dpt_status dpt_vk_enter(dpt_backend *be);
dpt_status dpt_vk_leave(dpt_backend *be, dpt_status st);

/* ---- vk_memory.c ----------------------------------------------------------------------- */
dpt_status dpt_vk_memory_init(dpt_vk_ctx *ctx);
void dpt_vk_memory_destroy(dpt_vk_ctx *ctx);
dpt_status dpt_vk_alloc_create(dpt_vk_ctx *ctx, VkDeviceSize bytes, dpt_vk_memkind kind,
                               dpt_vk_alloc **out);
/* Releases now, or once the last batch using it completed. */
void dpt_vk_alloc_release(dpt_vk_ctx *ctx, dpt_vk_alloc *al);
/* Releases deferred frees whose batch completed. */
void dpt_vk_memory_reclaim(dpt_vk_ctx *ctx);
/* The backend scratch buffer with at least `bytes`, or the partials buffer. */
dpt_status dpt_vk_scratch(dpt_vk_ctx *ctx, VkDeviceSize bytes, dpt_vk_alloc **out);
dpt_status dpt_vk_partials(dpt_vk_ctx *ctx, VkDeviceSize bytes, dpt_vk_alloc **out);

/* The vtable's memory entries (contracts in backend_impl.h). map gives a host pointer in direct
 * mode, after the buffer's pending work, else NULL. */
dpt_status dpt_vk_buffer_alloc(dpt_backend *be, dpt_buffer *buf);
void dpt_vk_buffer_free(dpt_backend *be, dpt_buffer *buf);
dpt_status dpt_vk_upload(dpt_backend *be, dpt_buffer *dst, size_t offset, const void *src,
                         size_t bytes);
dpt_status dpt_vk_map(dpt_backend *be, dpt_buffer *buf, size_t offset, size_t bytes, void **ptr);
/* The fenced transfers (backend_impl.h): in direct mode only. */
int dpt_vk_fence(dpt_backend *be, dpt_fence *f);
void dpt_vk_fence_free(dpt_backend *be, dpt_fence *f);
dpt_status dpt_vk_fence_wait(dpt_backend *be, const dpt_fence *f);
dpt_status dpt_vk_download_after(dpt_backend *be, const dpt_fence *f, size_t offset, void *dst,
                                 size_t bytes);
dpt_status dpt_vk_upload_after(dpt_backend *be, const dpt_fence *f, size_t offset, const void *src,
                               size_t bytes);
dpt_status dpt_vk_download(dpt_backend *be, const dpt_buffer *src, size_t offset, void *dst,
                           size_t bytes);
dpt_status dpt_vk_copy(dpt_backend *be, dpt_buffer *dst, size_t dst_offset, const dpt_buffer *src,
                       size_t src_offset, size_t bytes);
dpt_status dpt_vk_fill_f32(dpt_backend *be, dpt_buffer *dst, size_t offset_elems, size_t count,
                           float value);

/* ---- vk_exec.c ------------------------------------------------------------------------- */
dpt_status dpt_vk_exec_init(dpt_vk_ctx *ctx);
void dpt_vk_exec_destroy(dpt_vk_ctx *ctx);
/* The command buffer of the current batch (started if needed) with the barrier that orders the
 * next command after everything recorded before it. Counts one command. */
dpt_status dpt_vk_cmd(dpt_vk_ctx *ctx, VkCommandBuffer *out);
/* Marks an allocation as used by the batch being recorded. */
void dpt_vk_touch(dpt_vk_ctx *ctx, dpt_vk_alloc *al);
/* Submits the batch being recorded, if any (does not wait). */
dpt_status dpt_vk_submit(dpt_vk_ctx *ctx);
/* Waits until every batch with serial <= `serial` has finished (submitting it if needed). */
dpt_status dpt_vk_wait(dpt_vk_ctx *ctx, uint64_t serial);
/* Notes batches that finished, without blocking. */
dpt_status dpt_vk_poll(dpt_vk_ctx *ctx);
/* Waits for all recorded work. */
dpt_status dpt_vk_finish(dpt_vk_ctx *ctx);
/* Serial of the batch being recorded, or of the next one. */
uint64_t dpt_vk_current_serial(const dpt_vk_ctx *ctx);

/* Whether a window can be bound as a texel view of 4-byte texels (gemm_tex.spv, *_tex.spv). */
int dpt_vk_tex_ok(const dpt_vk_ctx *ctx, const dpt_vk_win *w);
/* Window over `count` elements of `esize` bytes at element `off` of `al`. DPT_ERR_UNSUPPORTED
 * when it exceeds maxStorageBufferRange. */
dpt_status dpt_vk_window(dpt_vk_ctx *ctx, dpt_vk_alloc *al, size_t off, size_t count, size_t esize,
                         dpt_vk_win *out);
/* Records one dispatch of `groups` workgroups (linear; shaders rebuild the index from
 * gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) with windows bound to bindings
 * 0..nwin-1 and `push` (push_bytes <= DPT_VK_PUSH_BYTES) as push constants. */
dpt_status dpt_vk_dispatch(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, const dpt_vk_win *wins, uint32_t nwin,
                           const void *push, uint32_t push_bytes, uint64_t groups);
/* The same with gz layers of workgroups along z (gl_WorkGroupID.z; gz <=
 * maxComputeWorkGroupCount[2]): batched ops take the batch item from z. */
dpt_status dpt_vk_dispatch_z(dpt_vk_ctx *ctx, dpt_vk_pipe pipe, const dpt_vk_win *wins,
                             uint32_t nwin, const void *push, uint32_t push_bytes, uint64_t groups,
                             uint32_t gz);
/* Largest element count an element-wise op may give one dispatch for tensors of `esize`. */
size_t dpt_vk_chunk_elems(const dpt_vk_ctx *ctx, size_t esize);

/* ---- vk_ops.c: one vtable entry per op of DPT_OP_MAP ---------------------------------- */
#define DPT_VK_OP_DECL_(NAME, name)                                                                \
  dpt_status dpt_vk_##name(dpt_backend *be, const dpt_##name##_args *a);
DPT_OP_MAP(DPT_VK_OP_DECL_)
#undef DPT_VK_OP_DECL_

#endif
