"""What one accept run measures: the server it ran against and one record per prompt."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional


class NoSpeculation(Exception):
    """Marker mixed into the error raised for a server that runs without speculative decoding."""


@dataclass
class ServerInfo:
    """The server as it describes itself.

    Attributes:
        kind: ``"sglang"`` or ``"vllm"``.
        url: base URL.
        version: the server's release (SGLang ``server_info.version``, vLLM ``/version``).
        model: the target model path or name it serves (SGLang ``model_path``, vLLM ``/v1/models`` root).
        served_name: the name requests must use (``served_model_name`` / the model id).
        draft: the draft model path (None where the server does not say).
        algorithm: the speculative algorithm (``EAGLE3``, ``eagle3``, ...).
        k: draft positions per verify step (SGLang ``speculative_num_steps``, vLLM
            ``num_speculative_tokens``); per-position acceptance has ``k`` entries.
        flags: the settings a baseline records (speculative settings, dtype, device, CUDA graphs,
            attention backend, the launch command where the server gives it).
    """

    kind: str
    url: str
    version: str
    model: str
    served_name: str
    draft: Optional[str]
    algorithm: Optional[str]
    k: int
    flags: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PromptResult:
    """One prompt's counters, as the server reported them for that request alone.

    Attributes:
        id: the prompt's id.
        completion_tokens: tokens generated.
        steps: verify steps (SGLang ``spec_verify_ct``; vLLM ``num_spec_steps`` / ``spec_decode_num_drafts``).
        committed: the accept length's numerator: accept length = ``committed / steps`` (SGLang:
            ``completion_tokens``, its ``spec_accept_length`` definition, the token sampled at prefill
            included; vLLM: ``steps + accepted draft tokens``, its ``mean_acceptance_length``).
        accepted_per_pos: ``[c_1..c_k]``: verify steps in which draft position ``i`` was accepted
            (from SGLang's ``spec_correct_drafts_histogram``: ``c_i = sum_{j >= i} h[j]``).
        histogram: the server's correct-drafts histogram when it gives one (``h[j]`` steps that
            accepted exactly ``j`` drafts), else None.
        seconds: wall time of the request.
        source: where the counters came from (``meta_info``, ``metrics.speculative_decoding``,
            ``/metrics delta``).
    """

    id: str
    completion_tokens: int
    steps: int
    committed: int
    accepted_per_pos: list[int]
    histogram: Optional[list[int]]
    seconds: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PromptResult":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def per_pos_from_histogram(hist: list[int], k: int) -> list[int]:
    """``[c_1..c_k]`` with ``c_i = sum_{j >= i} h[j]`` (the chain rule of
    :mod:`eagle3_conformance.acceptance.stats`: position ``i`` is accepted only if ``1..i-1`` were).

    Raises:
        ValueError: a count of more than ``k`` accepted drafts, or a negative count.
    """
    h = [int(c) for c in hist]
    if any(c < 0 for c in h) or any(h[k + 1:]):
        raise ValueError(f"histogram {h} does not fit k = {k}")
    return [sum(h[i:]) for i in range(1, k + 1)]
