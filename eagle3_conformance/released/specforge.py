"""One SpecForge release's own rule for which target tensors its training data holds, run in
isolation on the released source (:mod:`eagle3_conformance.released.isolated`).

SpecForge resolves the capture layers with ``resolve_eagle_capture_layers``
(``specforge/algorithms/model_providers.py``: the run's override, else the draft config's nested
``eagle_config.eagle_aux_hidden_state_layer_ids``, else its own default; exactly three
non-negative ids) and captures them in the SGLang release it pins (0.2.0: server-only, ``Requires-Dist:
sglang==0.5.14``), whose target class's ``set_eagle3_layers_to_capture`` receives the ids
(``offline_capture/sglang_backend/capture.py`` ``set_eagle3_capture_layers``). Both run here: the
resolver on the contract's draft config, then that SGLang release's setter
(:func:`eagle3_conformance.released.sglang.run_setter`), the release read from the wheel's own
``METADATA``. Stand-ins: the run config has no override (``cfg.model.aux_hidden_state_layer_ids``
None) and the target config holds the contract's L.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace

from eagle3_conformance.released.isolated import SourceTree, Unavailable, function

_PROVIDERS = "specforge.algorithms.model_providers"
_BACKEND = "specforge.offline_capture.sglang_backend.capture"


@dataclass
class Resolved:
    """The ids a SpecForge release resolves and the SGLang release it captures them with."""

    ids: list[int]
    sglang: str
    sites: list[str] = field(default_factory=list)


def pinned_sglang(tree: SourceTree) -> tuple[str, str]:
    """``(version, "specforge-X.dist-info/METADATA:line")`` of the wheel's ``Requires-Dist: sglang==V``.

    Raises:
        Unavailable: the wheel pins no single SGLang release.
    """
    for meta in sorted(tree.root.glob("specforge-*.dist-info/METADATA")):
        for n, line in enumerate(meta.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = re.match(r"Requires-Dist:\s*sglang\s*==\s*([0-9][^\s;,]*)\s*$", line)
            if m:
                return m.group(1), f"{meta.relative_to(tree.root).as_posix()}:{n}"
    raise Unavailable(f"{tree.label}: its METADATA pins no single SGLang release (Requires-Dist: sglang==V), so "
                      "which SGLang captures its data is not known from its own files")


def resolve(tree: SourceTree, L: int, draft_cfg: dict) -> Resolved:
    """``resolve_eagle_capture_layers`` of this release on ``draft_cfg`` (a draft config.json as a dict).

    Raises:
        Unavailable: the resolver is not in this release or needs what isolation cannot give.
        ValueError: the release refuses the ids (its own words).
    """
    fn, site = function(tree, _PROVIDERS, "resolve_eagle_capture_layers")
    cfg = SimpleNamespace(model=SimpleNamespace(aux_hidden_state_layer_ids=None))
    ids = [int(i) for i in fn(cfg, dict(draft_cfg), SimpleNamespace(num_hidden_layers=L))]
    version, pin = pinned_sglang(tree)
    sites = [site, pin]
    try:
        sites.append(function(tree, _BACKEND, "set_eagle3_capture_layers", cls="OfflineSGLangCaptureBackend")[1])
    except Unavailable:
        pass  # older layouts hand the ids to SGLang elsewhere; the pin still says which SGLang
    return Resolved(ids, version, sites)
