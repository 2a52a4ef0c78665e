import torch
import torch.nn as nn


class Model(nn.Module):
    """Append new tokens' keys and values to a paged KV cache (vLLM `reshape_and_cache_flash`).

    Cache layout NHD per page: k_cache, v_cache [num_pages, page_size, num_kv_heads, head_size].
    slot_mapping[t] = page * page_size + offset is where token t goes; a negative slot (padding
    entries of a CUDA-graph batch) is skipped, as in vLLM. The caches are updated in place
    (metadata.json declares them in `mutates`); nothing else is returned.
    """

    def forward(self, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> dict:
        num_kv_heads, head_size = k_cache.shape[2], k_cache.shape[3]
        valid = slot_mapping >= 0
        slots = slot_mapping[valid].long()
        k_cache.view(-1, num_kv_heads, head_size)[slots] = key[valid].to(k_cache.dtype)
        v_cache.view(-1, num_kv_heads, head_size)[slots] = value[valid].to(v_cache.dtype)
        return {}
