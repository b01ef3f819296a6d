"""The target's own greedy decode, the losslessness oracle of the engine paths."""

from __future__ import annotations


def target_greedy(target_dir, prompts: list[list[int]], max_new_tokens: int, dtype: str) -> list[list[int]]:
    """Each prompt (token ids) decoded greedily by the target (transformers, KV cache, EOS ignored):
    ``max_new_tokens`` ids per prompt. float32 is the oracle (bf16 flips near-ties)."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=getattr(torch, dtype)).eval()
    out = []
    with torch.no_grad():
        for p in prompts:
            ids, past, got = torch.tensor([p]), None, []
            for _ in range(max_new_tokens):
                o = model(input_ids=ids, past_key_values=past, use_cache=True)
                past, nxt = o.past_key_values, int(o.logits[0, -1].argmax())
                got.append(nxt)
                ids = torch.tensor([[nxt]])
            out.append(got)
    return out
