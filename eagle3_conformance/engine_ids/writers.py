"""Which boundary each training-data writer stores for one layer id (R90, verl-project/verl-SpeCo#20, #21).

Three writers of EAGLE-3 training data read output-of layer ids (id i = the output of decoder layer i,
``B_{i+1}``) and agree on every id but two:

===================  ===========  ===========  =====================================================================
writer               id L - 1     id -1        why
===================  ===========  ===========  =====================================================================
``sglang-online``    ``B_L``      ``B_0``      SGLang's aux capture during rollout: the residual stream entering layer
                                               i + 1 (llama-family setters add 1, ``llama.py:929``; B_L only where the
                                               model file captures at the final boundary, :mod:`.final_boundary`)
``hf-offline``       ``F``        ``B_0``      transformers' ``output_hidden_states[i + 1]``: entry 0 is the embedding
                                               output; on transformers >= 5 entry L is tied to ``last_hidden_state``,
                                               the final norm's output (``utils/output_capturing.py``
                                               ``tie_last_hidden_states``; :func:`transformers_ties_final` asks the
                                               installed copy)
``old-logprob``      ``F``        ``F``        verl's old-logprob pass collects the same HF tuple but indexes id -1 as
                                               Python's last entry (the thread's reading; verl-SpeCo is not installed
                                               here)
===================  ===========  ===========  =====================================================================

So one id names three tensors, and a dataset written by two of them mixes them under one slot.
:func:`writer_boundary` gives a writer's boundary for an id; :func:`writers_of` the writers that store a
given boundary for an id; :func:`writer_notes` the lines ``init`` prints for a contract's slots.
"""

from __future__ import annotations

from typing import Optional

from eagle3_conformance.core.notation import Boundary

WRITERS = {
    "sglang-online": "SGLang's online capture",
    "hf-offline": "an HF offline writer (transformers output_hidden_states)",
    "old-logprob": "verl's old-logprob writer",
}
"""Writer name -> words for messages."""


def writer_boundary(writer: str, layer_id: int, num_layers: int) -> Boundary:
    """The boundary ``writer`` stores for output-of ``layer_id`` on a target of ``num_layers`` layers.

    Raises:
        ValueError: an unknown writer, or an id outside -1..L-1.
    """
    if writer not in WRITERS:
        raise ValueError(f"unknown writer {writer!r}; known: {', '.join(WRITERS)}")
    L = int(num_layers)
    if not -1 <= layer_id <= L - 1:
        raise ValueError(f"output-of id {layer_id} is outside -1..{L - 1} (L = {L})")
    if layer_id == -1:
        return Boundary.parse("F") if writer == "old-logprob" else Boundary(0)
    if layer_id == L - 1 and writer != "sglang-online":
        return Boundary.parse("F")
    return Boundary(layer_id + 1)


def output_of_id(b: Boundary) -> Optional[int]:
    """The output-of id that names boundary ``b`` (``B_k`` -> k - 1; F: None, no id names it)."""
    return None if b.final else b.index - 1


def writers_of(layer_id: int, boundary: Boundary, num_layers: int) -> list[str]:
    """The writers that store ``boundary`` for ``layer_id`` (empty: none of them)."""
    return [w for w in WRITERS if writer_boundary(w, layer_id, num_layers) == boundary]


def disputed(layer_id: int, num_layers: int) -> bool:
    """Whether the writers store different tensors for ``layer_id`` (ids L - 1 and -1)."""
    return len({str(writer_boundary(w, layer_id, num_layers)) for w in WRITERS}) > 1


def who_wrote(layer_id: int, boundary: Boundary, num_layers: int) -> str:
    """Words naming the writers that store ``boundary`` for ``layer_id`` ("none of the writers ...")."""
    ws = writers_of(layer_id, boundary, num_layers)
    if not ws:
        return f"none of the known writers stores {boundary} for id {layer_id}"
    return " and ".join(WRITERS[w] for w in ws)


def writer_notes(boundaries: list[Boundary], num_layers: int) -> list[str]:
    """One line per aux slot whose output-of id the writers read differently (R90): which boundary
    each writer stores for it."""
    out = []
    for j, b in enumerate(boundaries):
        i = output_of_id(b)
        if i is None or not -1 <= i <= num_layers - 1 or not disputed(i, num_layers):
            continue
        each = "; ".join(f"{WRITERS[w]} stores {writer_boundary(w, i, num_layers)}" for w in WRITERS)
        out.append(f"slot {j} ({b}) is output-of id {i}, which the training-data writers read differently (R90, "
                   f"verl-SpeCo#20/#21): {each}. Data from two of them mix tensors under one slot: generate with one "
                   f"writer, and check-data names which one wrote each sample")
    return out


def transformers_ties_final() -> bool:
    """Whether the installed transformers returns F (the final norm's output) as
    ``output_hidden_states[L]``, asked of its code on a 2-layer random Llama: the reason the HF
    writer stores F for id L - 1.

    Raises:
        ImportError: torch or transformers is not installed.
    """
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2)
    m = LlamaForCausalLM(cfg).eval()
    seen = []
    h = m.model.layers[-1].register_forward_hook(lambda mod, a, o: seen.append(o[0] if isinstance(o, tuple) else o))
    try:
        with torch.no_grad():
            out = m(torch.tensor([[1, 2, 3, 4]]), output_hidden_states=True)
    finally:
        h.remove()
    last = out.hidden_states[cfg.num_hidden_layers]
    return bool(torch.allclose(last, m.model.norm(seen[-1]))) and not bool(torch.allclose(last, seen[-1]))
