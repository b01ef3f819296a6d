"""``sglang-dflash``: SGLang's real DFlash capture -> its real ``DFlashDraftModel`` (issue 14), on every
release the CPU harness serves (0.5.23; 0.5.14 in ``tox -e sglang-0.5.14``).

For a ``method: dflash`` contract. The draft config is the pair's own ``config.json`` (its
``dflash_config.target_layer_ids`` is resolved by SGLang's own ``dflash_utils.py`` and applied by the
release's own apply step, which calls the target's ``set_dflash_layers_to_capture``). Hypothesis
draws prompt batches (extend: target EXTEND, FULL capture) and verify layouts (decode:
TARGET_VERIFY over a cached prefix); the taps the draft's ``fc`` reads are fingerprinted against the reference like EAGLE-3 aux slots
(:class:`eagle3_conformance.tools.sglang_cpu.families.DFlashCPU`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eagle3_conformance.environment.engines import HARNESS_RELEASES
from eagle3_conformance.paths.base import Needs, Observation, Path, Skipped, min_prompt_len, start_token


@dataclass
class _State:
    contract: Any
    dflash: Any  # DFlashCPU
    pool: Any = None


def prepare(c, pair):
    from eagle3_conformance.suite.pairs import torch_dtype
    from eagle3_conformance.testbed.corpus import prompt_pool
    from eagle3_conformance.tools.sglang_cpu.families import DFlashConfigError, DFlashCPU, runtime_harness

    cfg = json.loads((pair.draft_dir / "config.json").read_text())
    if "dflash_config" not in cfg and "target_layer_ids" not in cfg and not any(
            "dflash" in str(a).lower() for a in cfg.get("architectures") or []):
        return Skipped(f"{pair.draft_dir}/config.json is not a DFlash draft config")
    h = runtime_harness(pair.target_dir, torch_dtype(c.serving_dtype))
    try:
        d = DFlashCPU(h, cfg)
    except DFlashConfigError as e:  # SGLang refuses at load: that is the finding, not a crash
        raise AssertionError(f"SGLang {h.sglang_version} refuses the DFlash draft config: {e}") from None
    return _State(c, d, prompt_pool(pair.target_dir))


def first(s: _State) -> Observation:
    return Observation(facts={"sglang_version": s.dflash.h.sglang_version})


def observe(s: _State, draw) -> Observation:
    """One drawn extend batch and one drawn verify step through SGLang's DFlash capture."""
    from eagle3_conformance.suite import strategies

    c = s.contract
    batch = draw(strategies.prompt_batches(c.target.vocab_size, start_token=start_token(c),
                                           min_len=min_prompt_len(c), pool=s.pool), label="batch")
    prefixes, fillers, _accepted = draw(strategies.verify_layouts(c.target.vocab_size, pool=s.pool), label="verify")
    return Observation(captures=list(s.dflash.extend(batch)) + list(s.dflash.verify(prefixes, fillers)))


PATH = Path(
    name="sglang-dflash",
    summary="SGLang's DFlash capture (0.5.23 or 0.5.14; set_dflash_layers_to_capture) -> its DFlashDraftModel fc, "
            "on extend and on target verify",
    needs=Needs(modules=("sglang",), draft=True, methods=("dflash",), also_on={"sglang": HARNESS_RELEASES}),
    prepare=prepare,
    first=first,
    observe=observe,
)
