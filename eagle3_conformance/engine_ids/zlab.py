"""The z-lab DFlash reference code (PyPI ``dflash`` 0.1.0, "Author: Z Lab", github.com/z-lab/dflash), asked
for its own DFlash tap rule and fallback (issue 37, R58-R62): ``dflash/model.py``
``extract_context_feature`` reads ``hidden_states[layer_id + 1]`` (its ``offset = 1``) and
``build_target_layer_ids(L, n)`` is the fallback used when a draft config has no ``target_layer_ids``
(``[L // 2]`` for one draft layer, else ``round(1 + i * (L - 4) / (n - 1))``).

The package is optional: install it with ``pip install --no-deps dflash==0.1.0`` (its ``local`` extra pins
torch / transformers, which the environment already has). Without it every call raises
:class:`~eagle3_conformance.engine_ids.base.TranslationError` saying so.
"""

from __future__ import annotations

from typing import Sequence

from eagle3_conformance.engine_ids.base import TranslationError

VERSION = "0.1.0"


def _model():
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()  # transformers imports torchvision; prepare() makes that import work on CPU
    try:
        from dflash import model  # z-lab's package (imports torch and transformers' qwen3 classes)
    except ImportError as e:
        raise TranslationError(f"zlab: the z-lab reference package is not installed here (pip install --no-deps "
                               f"dflash=={VERSION}): {e}", not_installed=True) from None
    return model


def zlab_taps(ids: Sequence[int], num_layers: int) -> list[int]:
    """Boundary indices z-lab's ``extract_context_feature`` reads for DFlash ``ids`` on a target of
    ``num_layers`` layers, found by calling it on index-tagged tensors (HF ``hidden_states[k]`` = ``B_k``).

    Raises:
        TranslationError: the package is absent, or an id indexes past ``hidden_states[L]``.
    """
    import torch

    tagged = [torch.full((1, 1), float(k)) for k in range(num_layers + 1)]
    try:
        got = _model().extract_context_feature(tagged, [int(i) for i in ids])
    except IndexError:
        raise TranslationError(f"zlab: ids {list(ids)} index past hidden_states[{num_layers}]") from None
    return [int(v) for v in got.flatten().tolist()]


def zlab_formula(num_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's ``build_target_layer_ids``: the ids its draft uses without ``target_layer_ids``."""
    return [int(i) for i in _model().build_target_layer_ids(num_layers, num_draft_layers)]
