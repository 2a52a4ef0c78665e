import torch
import torch.nn as nn


class Model(nn.Module):
    """Top-k then top-p (nucleus) sampling from probabilities, with the random numbers as an input
    (FlashInfer `top_k_top_p_sampling_from_probs` style, filter order "top_k_first", one uniform per
    row so the result is a deterministic function of the inputs).

    Definition (all sums are exact in fp32 because probs are multiples of 2^-24 summing to <= 1):
    1. order the vocabulary by (prob descending, token id ascending);
    2. top-k: keep the first min(top_k, V) tokens; M_k = their mass;
    3. top-p on the renormalized top-k distribution: keep a token of the top-k iff the mass ranked
       strictly before it is < top_p * M_k (fp32 product), i.e. the smallest prefix reaching top_p;
       the first token is always kept;
    4. sample by inverse CDF in token-id order over the kept set K: with M = mass of K and
       t = uniform * M (fp32 product), return the first id whose cumulative kept mass is > t (or
       reaches M, which covers the rounding case t == M).
    Output: token ids [B], int64.
    """

    def forward(self, probs: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                uniform: torch.Tensor) -> torch.Tensor:
        vocab = probs.shape[-1]
        sorted_p, sorted_idx = torch.sort(probs, dim=-1, descending=True, stable=True)
        rank = torch.arange(vocab, device=probs.device)
        in_k = rank[None, :] < top_k.clamp(1, vocab).long()[:, None]
        pk = torch.where(in_k, sorted_p, torch.zeros_like(sorted_p))
        mass_k = pk.sum(dim=-1)
        before = pk.cumsum(dim=-1) - pk
        keep_sorted = in_k & (before < (top_p * mass_k)[:, None])
        keep = torch.zeros_like(keep_sorted).scatter(1, sorted_idx, keep_sorted)
        kept = torch.where(keep, probs, torch.zeros_like(probs))
        mass = kept.sum(dim=-1)
        cdf = kept.cumsum(dim=-1)
        hit = (cdf > (uniform * mass)[:, None]) | (cdf >= mass[:, None])
        return hit.to(torch.int32).argmax(dim=-1)
