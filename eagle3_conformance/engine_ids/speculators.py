"""speculators' EAGLE-3 id rule. From 0.5: id i = ``B_i``; training ids at the top level of the
speculators config, data generation list = aux ids + [L] (``scripts/launch_vllm.py:69-143``).
0.3/0.4: output-of ids, data generation list appended with L-1 (REFERENCE.md 5.3; the re-basing is
vllm-project/speculators#353). Other releases' own code: :mod:`eagle3_conformance.released.speculators`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from eagle3_conformance.core.notation import Boundary
from eagle3_conformance.engine_ids.base import (
    TOP_KEY,
    ToolIds,
    TranslationError,
    engine_default_aux_ids,
    read_listed_ids,
    version_key,
)


def to_tool_ids(bs: list[Boundary], L: int, *, architecture: str, version: Optional[str], verifier,
                allow_embedding: bool) -> ToolIds:
    """speculators: output-of ids for 0.3/0.4 data generation, boundary ids from 0.5."""
    ver = version or "0.9.0"
    old = version_key(ver) < (0, 5)
    v = Boundary.parse(verifier) if verifier is not None else Boundary(L)
    if v.final:
        raise TranslationError("speculators stores B_L (pre-norm) as the verifier slot and applies "
                               "verifier_norm in training; it cannot store F (REFERENCE.md 5.3)", verifier=True)
    if old:
        if any(b.index == 0 for b in bs):
            raise TranslationError("B_0 cannot be expressed in speculators 0.3/0.4 output-of ids (it would be -1)")
        ids = [b.index - 1 for b in bs]
        gen = ids + [L - 1]
        return ToolIds("speculators", f"speculators=={ver} (0.3/0.4 data generation: output-of ids; "
                       "REFERENCE.md 5.3)", ids, "data generation --layer-ids (config ids written null)",
                       "output_of", extra={"data_generation_ids": gen},
                       notes=["0.3/0.4 write null ids into the config; under vLLM defaults that is one "
                              "layer off (REFERENCE.md 5.3)"])
    if any(b.index == 0 for b in bs) and not allow_embedding:
        raise TranslationError("B_0 (embedding) is an aux slot but embedding capture is not allowed")
    ids = [b.index for b in bs]
    return ToolIds("speculators", f"speculators>=0.5 (checked against {ver}; REFERENCE.md 2.1, 5.3)", ids,
                   f"speculators config.json: {TOP_KEY} (top level; training, resolve_target_layer_ids)",
                   "boundary", extra={"data_generation_ids": ids + [L],
                                      "data_generation_key": "scripts/launch_vllm.py --target-layer-ids "
                                      "(--include-last-layer appends L; speculators 0.9.0)"},
                   notes=["the data must store the aux slots ascending with B_L last; routing is purely "
                          "positional (REFERENCE.md 5.2)"])


def to_boundaries(ids: Optional[Sequence[int]], L: int, *, architecture: str, version: Optional[str],
                  allow_embedding: bool) -> list[Boundary]:
    """What speculators ``version`` (None: 0.9.0) trains on for ``ids`` (None: the defaults):
    output-of before 0.5, boundary ids from 0.5. The default ids ``[2, L//2, L-3]`` are read the
    same way: 0.3/0.4's generator defaults to ``[2, L//2, L-3, L-1]`` and captures after each listed
    layer (B_3, B_{L//2+1}, B_{L-2}; ``vllm_hidden_states_generator.py:102``, ``custom_worker.py``),
    as running the released code shows (tests/test_upgrade_check.py)."""
    old = bool(version and version_key(version) < (0, 5))
    if ids is None:
        if not old:
            return [Boundary(i) for i in engine_default_aux_ids(L)]
        ids = engine_default_aux_ids(L)
    return read_listed_ids("speculators", ids, L, output_of=old, allow_embedding=allow_embedding)
