"""Training data of a multimodal target without vision features (R92, vllm-project/speculators#606 and
vllm#34608): the data hold the image placeholder ids, but the generator ran the target text-only, so the
rows at those positions are the placeholder's embedding carried through the layers, while serving feeds
the draft the B_k of real image tokens. speculators 0.9.0 sends a row's ``messages`` to the generator only
when they carry non-text parts (``train/data.py`` ``build_client_item`` / ``_has_multimodal_content``);
a row without them is extracted from ``input_ids`` alone, i.e. with no image.
"""

from __future__ import annotations

from eagle3_conformance.checks.registry import FACT, check
from eagle3_conformance.contract import Contract
from eagle3_conformance.core.findings import Finding

_LIST = 6


def _names(xs: list[str]) -> str:
    return ", ".join(xs[:_LIST]) + (f" and {len(xs) - _LIST} more" if len(xs) > _LIST else "")


@check(FACT, ("K11",), fact="vision_data")
def check_vision_features(c: Contract, fig: dict, path: str = "data") -> list[Finding]:
    """R92: for a contract whose serving feeds image tokens (``multimodal.image_tokens_served``), the
    training data hold image positions written with the vision tower's features: at least one sample
    holds the placeholder id ``multimodal.image_token_id``, and every sample that holds it was written
    from a request carrying its image (where the layout records the request).

    Args:
        fig: ``{"samples": n, "with_image_token": [sample names], "with_vision_request": [sample names] or
            None (the layout records no request: speculators data without a messages column, vLLM
            extraction files), "source": words}`` (:func:`eagle3_conformance.scan.multimodal.vision_data`).
    """
    mm = c.multimodal
    if mm is None:
        return []
    where = f"{fig.get('samples', 0)} samples ({fig.get('source', 'the data')})"
    if not mm.image_tokens_served:
        return [Finding("vision_features", "skip", path, None, "image tokens not served", None, where,
                        "the contract serves no image tokens (multimodal.image_tokens_served: false): not judged", "K11")]
    img = list(fig.get("with_image_token") or [])
    vis = fig.get("with_vision_request")
    if not img:
        return [Finding("vision_features", "fail", path, None, f"samples holding image token {mm.image_token_id}", 0,
                        where, f"text-only data: none of {fig.get('samples', 0)} samples holds the image placeholder id "
                               f"{mm.image_token_id}, but serving feeds the draft image tokens "
                               "(multimodal.image_tokens_served): the draft never saw an image position (R92, "
                               "speculators#606); generate data from requests that carry images", "K11")]
    if vis is None:
        return [Finding("vision_features", "skip", path, None, "image positions written with vision features",
                        f"{len(img)} samples hold image tokens", where,
                        f"{len(img)} samples hold the image placeholder id {mm.image_token_id}, but this layout "
                        "records no request, so whether the vision tower ran cannot be told from the data", "K11")]
    blind = [s for s in img if s not in set(vis)]
    if blind:
        return [Finding("vision_features", "fail", path, None, "image positions written with vision features",
                        f"{len(blind)} of {len(img)} without", where,
                        f"{len(blind)} of {len(img)} samples holding the image placeholder id {mm.image_token_id} were "
                        f"written from a request without its image ({_names(blind)}): their rows at the placeholder "
                        "positions are the placeholder's text embedding, not the vision features serving feeds the "
                        "draft (R92, speculators#606: input_ids with placeholders, no mm_features)", "K11")]
    return [Finding("vision_features", "pass", path, None, "image positions written with vision features",
                    f"{len(img)} of {len(img)} with", where,
                    f"all {len(img)} samples holding image token {mm.image_token_id} were written from requests "
                    "carrying their images", "K11")]
