"""Which token space the draft works in (K10, K11): the draft-vocabulary mapping (absolute ids
where offsets belong, or missing), and training text tokenized with another template than
serving's."""

from __future__ import annotations

from eagle3_conformance.faults.example import Knobs
from eagle3_conformance.faults.operators.base import Apply, NotApplicable, Operator, both
from eagle3_conformance.faults.tokens import NO_BOS_TEMPLATE, THINK_TEMPLATE

KINDS = {
    "K10": "vocab mapping",
    "K11": "tokenization / template",
}
"""The fault kinds (fault-kinds.md) of this family, as the matrix names them."""


_NA_SF_MAPPING = NotApplicable(
    "SpecForge's offline feature files hold no vocab mapping: d2t/t2d are built by its data preprocessing into the "
    "draft checkpoint, which the offline loader chain does not read")
_NA_DECODE_TEXT = NotApplicable("decode consumes ids the engine sampled; no text is tokenized on this path")


OPERATORS: list[Operator] = [
    Operator("d2t-absolute", "K10", "d2t holds absolute target ids, not offsets", ("vocab_mapping",), {
        "training": Apply("d2t-{N}.npy written as absolute ids", "data files",
                          lambda s, c, e: Knobs(mapping="absolute")),
        "specforge": _NA_SF_MAPPING,
        **both("draft checkpoint d2t holds absolute ids (hot_token_id = d2t + arange)", "engine knob (checkpoint)",
                lambda s, c, e: Knobs(d2t="absolute"))}),
    Operator("d2t-missing", "K10", "vocab mapping missing", ("vocab_mapping",), {
        "training": Apply("no d2t/t2d files: the trainer falls back to the full vocab", "data files",
                          lambda s, c, e: Knobs(mapping="missing")),
        "specforge": _NA_SF_MAPPING,
        **both("draft checkpoint without d2t: hot_token_id stays None", "engine knob (checkpoint)",
                lambda s, c, e: Knobs(d2t="missing"))}),
    Operator("chat-template-differs", "K11", "training text tokenized differently from serving",
             ("golden_tokens", "chat_template"), {
        "training": Apply("training-mode template injects an empty think block", "data generator template",
                          lambda s, c, e: Knobs(train_template=THINK_TEMPLATE)),
        "specforge": Apply("training-mode template injects an empty think block", "data generator template",
                           lambda s, c, e: Knobs(train_template=THINK_TEMPLATE)),
        "sglang-extend": Apply("the engine's template drops BOS", "engine tokenizer template",
                               lambda s, c, e: Knobs(serving_template=NO_BOS_TEMPLATE)),
        "sglang-decode": _NA_DECODE_TEXT}),
]
