"""The target's own greedy decode, the losslessness oracle of the engine paths.

The decode is cached on disk next to the reference's boundaries (``<model cache root>/greedy``,
:func:`eagle3_conformance.environment.cache.model_cache_root`), keyed the way the reference's disk cache
is (:meth:`eagle3_conformance.reference.ReferenceModel.model_key`): the target directory, its config.json
bytes, every top-level file's name, size and mtime, the compute dtype, the torch and transformers versions
and this module's source; plus the prompts and ``max_new_tokens``. A warm run of the suite asks for the
same decode each time and reads it back instead of loading the target and decoding again (one forward per
new token). ``CONFORMANCE_REFERENCE_CACHE=0`` (the reference cache's switch,
:data:`eagle3_conformance.environment.cache.REFERENCE_CACHE_ENV`): no disk cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from eagle3_conformance.environment.cache import write_json_atomically

GREEDY_DIR = "greedy"
"""The cache's folder under the model cache root (beside ``reference``, the boundaries' cache)."""


def target_greedy(target_dir, prompts: list[list[int]], max_new_tokens: int, dtype: str) -> list[list[int]]:
    """Each prompt (token ids) decoded greedily by the target (transformers, KV cache, EOS ignored):
    ``max_new_tokens`` ids per prompt. float32 is the oracle (bf16 flips near-ties). Read from the disk
    cache when a decode with the same key was stored (see the module docstring), else computed and stored."""
    prompts = [[int(t) for t in p] for p in prompts]
    path = cache_file(target_dir, prompts, max_new_tokens, dtype)
    got = _read(path, prompts, max_new_tokens, dtype) if path is not None else None
    if got is None:
        got = compute_greedy(target_dir, prompts, max_new_tokens, dtype)
        if path is not None:
            doc = {"prompts": prompts, "max_new_tokens": int(max_new_tokens), "dtype": dtype, "out": got}
            write_json_atomically(path, doc)  # a read-only cache only costs recomputation
    return got


def compute_greedy(target_dir, prompts: list[list[int]], max_new_tokens: int, dtype: str) -> list[list[int]]:
    """:func:`target_greedy` without the cache: load the target, decode every prompt."""
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


def model_key(target_dir, dtype: str) -> str:
    """sha256 naming the target's decodes: its resolved directory, config.json bytes, every top-level file's
    name, size and mtime (weights, index, tokenizer), the dtype, torch and transformers versions, this source."""
    import torch
    import transformers

    d = Path(target_dir).resolve()
    h = hashlib.sha256((d / "config.json").read_bytes() + Path(__file__).read_bytes())
    h.update(f"{d};torch {torch.__version__}; transformers {transformers.__version__};{dtype};".encode())
    for f in sorted(p for p in d.iterdir() if p.is_file()):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:24]


def cache_file(target_dir, prompts: list[list[int]], max_new_tokens: int, dtype: str) -> Optional[Path]:
    """Where this decode is cached; None when the cache is switched off or the target has no config.json."""
    from eagle3_conformance.environment.cache import REFERENCE_CACHE_ENV, model_cache_root

    if os.environ.get(REFERENCE_CACHE_ENV, "1") == "0" or not (Path(target_dir) / "config.json").is_file():
        return None
    req = hashlib.sha256(json.dumps([prompts, int(max_new_tokens)]).encode()).hexdigest()[:32]
    return model_cache_root() / GREEDY_DIR / model_key(target_dir, dtype) / f"{req}.json"


def _read(path: Path, prompts: list[list[int]], max_new_tokens: int, dtype: str) -> Optional[list[list[int]]]:
    """The stored decode, or None (no file, a truncated or foreign file, another request under the name)."""
    try:
        doc = json.loads(path.read_text())
        if doc["prompts"] != prompts or doc["max_new_tokens"] != max_new_tokens or doc["dtype"] != dtype:
            return None
        out = doc["out"]
        ok = len(out) == len(prompts) and all(len(o) == max_new_tokens and all(type(t) is int for t in o) for o in out)
        return out if ok else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


