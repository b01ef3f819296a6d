"""The token side of a scenario (K10, K11): a tiny offline tokenizer, chat templates and the
golden conversation, and the draft-vocabulary mapping speculators builds."""

from __future__ import annotations

import hashlib
from typing import Sequence

_WORDS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>", "<think>", "</think>"] + [
    f"w{i}" for i in range(24)]
GOOD_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
# training-mode template that injects an empty think block before the last assistant turn
# (the Qwen3 pattern of sgl-project/SpecForge#296)
THINK_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if loop.last and m['role'] == 'assistant' %}<think> </think> "
    "{% endif %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
# serving-side variant: the BOS token dropped by the engine's template
NO_BOS_TEMPLATE = GOOD_TEMPLATE.replace("{{ bos_token }}", "")
GOLDEN_MESSAGES = [{"role": "user", "content": "w3 w7 w1"}, {"role": "assistant", "content": "w4 w4 w9 w2"}]

_TOKENIZER = None


def tiny_tokenizer():
    """A WordLevel tokenizer built offline with ``tokenizers`` (whitespace split), wrapped in
    transformers' ``PreTrainedTokenizerFast`` so templates render through ``apply_chat_template``."""
    global _TOKENIZER
    if _TOKENIZER is None:
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from tokenizers.pre_tokenizers import WhitespaceSplit
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(WordLevel({w: i for i, w in enumerate(_WORDS)}, unk_token="<unk>"))
        tok.pre_tokenizer = WhitespaceSplit()
        _TOKENIZER = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                             unk_token="<unk>")
    return _TOKENIZER


def render_ids(template: str, messages=GOLDEN_MESSAGES) -> list[int]:
    """Token ids of ``messages`` rendered with ``template`` through transformers'
    ``apply_chat_template`` (tokenize=True) on the tiny tokenizer."""
    tok = tiny_tokenizer()
    out = tok.apply_chat_template(messages, chat_template=template, tokenize=True, add_generation_prompt=False)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(x) for x in out]


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()



def vocab_mapping(samples: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], draft_vocab: int, vocab: int):
    """(d2t [draft_vocab] int64 offsets, t2d [vocab] bool) built by speculators' own
    ``build_vocab_mappings_from_distribution`` from the loss-masked token counts."""
    from collections import Counter

    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

    freq: Counter = Counter()
    for ids, m in zip(samples, masks):
        freq.update(int(t) for t, k in zip(ids, m) if k)
    return build_vocab_mappings_from_distribution(dict(freq), draft_vocab, vocab)
