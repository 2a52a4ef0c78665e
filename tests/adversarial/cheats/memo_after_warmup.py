# atrex-test: op=linear expected=suspicious finding=output_cache gpu=yes
"""Honest for the first 40 calls on the same inputs (more than the judged calls and replays make),
then returns the kept result through an own copy kernel: only long timing loops see the shortcut,
and on a GPU a copy of the output takes a fraction of the matmul's time. Caught by timing calls
on new values after the timed repetitions."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_matmul(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    row, cols = tl.program_id(0), tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * K + ks, mask=ks < K, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols[:, None] * K + ks[None, :],
                    mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.store(y_ptr + row * N + cols, acc, mask=cols < N)


@triton.jit
def _copy(src_ptr, dst_ptr, x_ptr, w_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


_seen: dict = {}


class Model(torch.nn.Module):
    def forward(self, x, weight):
        key = (x.data_ptr(), weight.data_ptr(), tuple(x.flatten()[:8].float().tolist()))
        count, kept = _seen.get(key, (0, None))
        if kept is not None and count >= 40:
            y = torch.empty_like(kept)
            _copy[(triton.cdiv(y.numel(), 1024),)](kept, y, x, weight, y.numel(), BLOCK=1024)
            return y
        _seen.clear()
        m, k = x.shape
        n = weight.shape[0]
        y = torch.empty((m, n), dtype=x.dtype, device=x.device)
        _row_matmul[(m, triton.cdiv(n, 64))](x, weight, y, n, k, BLOCK_N=64, BLOCK_K=64)
        _seen[key] = (count + 1, y)
        return y
