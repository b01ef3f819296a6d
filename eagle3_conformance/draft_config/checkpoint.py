"""What a draft checkpoint holds beyond its boundary, read statically (no engine, no forward): its
vocabulary mapping and head as SGLang 0.5.23 loads them, and its identity by content digest.

SGLang's EAGLE-3 draft (``srt/models/llama_eagle3.py``): ``lm_head`` has ``config.draft_vocab_size``
rows (the target's ``vocab_size`` and the target's own head when the config has none,
``load_lm_head_from_target``; the embedding when ``tie_word_embeddings``), ``d2t`` becomes
``hot_token_id = d2t + arange(len(d2t))`` (lines 350-352: offsets), ``t2d`` is skipped, and the
embedding is always the target's (``eagle_worker_v2.py`` ``init_lm_head`` -> ``set_embed``). A
parameter the checkpoint lacks keeps its initial values (the loader skips absent names).

:func:`read_draft_vocab` returns those facts for the ``draft_vocab`` check
(:func:`eagle3_conformance.checks.vocab.check_draft_vocab`); :func:`draft_digest` the sha256 of a draft
directory's content, which ``accept`` baselines record (a draft re-exported unchanged to another path
has the same digest).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Optional

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
CONTENT_FILES = ("config.json",)
"""Besides the weight files, what the digest covers: what SGLang reads (not a README or a training log)."""


def _tensor_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.is_file() and p.suffix == ".safetensors")


def read_draft_vocab(draft_dir: str | Path) -> dict[str, Any]:
    """The draft's vocabulary facts as SGLang loads them.

    Returns:
        ``{"source": dir, "draft_vocab_size": int | None (config.json), "config_vocab_size": int | None,
        "tie_word_embeddings": bool, "d2t": LongTensor [draft_vocab] | None, "t2d": BoolTensor [V] | None,
        "lm_head": [rows, d] | None, "embed_tokens": [V, d] | None}`` (tensors only for d2t and t2d; shapes
        for the rest, read from the safetensors headers), or ``{"skip": why}`` when the directory has no
        ``config.json`` or no ``*.safetensors`` (the facts cannot be read here).
    """
    d = Path(draft_dir)
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError) as e:
        return {"skip": f"{d}/config.json: not readable ({e})", "source": str(d)}
    files = _tensor_files(d) if d.is_dir() else []
    if not files:
        return {"skip": f"{d}: no *.safetensors weights to read d2t/t2d from", "source": str(d)}
    try:  # safe_open(..., "pt") hands torch tensors: a core install (accept) says so instead of dying
        import torch  # noqa: F401
        from safetensors import safe_open
    except ModuleNotFoundError as e:
        return {"skip": f"{d}: d2t/t2d not read: {e.name} is not installed (pip install "
                        "'eagle3-conformance[reference]')", "source": str(d)}

    out: dict[str, Any] = {"source": str(d), "draft_vocab_size": cfg.get("draft_vocab_size"),
                           "config_vocab_size": cfg.get("vocab_size"),
                           "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
                           "d2t": None, "t2d": None, "lm_head": None, "embed_tokens": None}
    for f in files:
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                short = name.removeprefix("model.")
                if short in ("d2t", "t2d"):
                    out[short] = st.get_tensor(name)
                elif short in ("lm_head.weight", "embed_tokens.weight"):
                    out[short.split(".")[0]] = list(st.get_slice(name).get_shape())
    return out


def draft_digest(draft_dir: str | Path) -> Optional[str]:
    """sha256 over the draft's ``config.json`` and weight files (name and bytes, sorted by name): equal for
    the same export under another path, different after any change to its config or weights. None when
    ``draft_dir`` is not a readable directory (a remote path, a hub id)."""
    d = Path(draft_dir)
    if not d.is_dir():
        return None
    files = sorted(p for p in d.iterdir() if p.is_file() and (p.name in CONTENT_FILES or p.suffix in WEIGHT_SUFFIXES))
    if not files:
        return None
    h = hashlib.sha256()
    try:
        for p in files:
            h.update(p.name.encode() + b"\0")
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()
