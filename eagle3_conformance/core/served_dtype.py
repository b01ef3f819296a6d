"""The words for a target served in another dtype than the contract's ``precision.serving``: one function,
so ``check-captures``, the ``sglang-engine`` and the ``vllm-engine`` paths (the ``serving-dtype``
diagnosis, :func:`eagle3_conformance.diagnose.precision._serving_dtype`; the ``dtype`` finding of a run
whose dtype the path chose, :func:`eagle3_conformance.checks.shape.check_dtype`) say the same thing in
every direction: float32 served on a half-precision contract, half precision served on a float32
contract, one half precision for the other.

Why it matters either way: the contract's serving precision sets the noise the capture gates allow
(:mod:`eagle3_conformance.core.gates`). Rows served in a lower precision than declared fail float32
gates on noise alone (false violations); rows served in a higher precision are judged with allowances
wider than they need (a small fault can hide in them), and the contract no longer says how the pair is
served. The fix is one key or one launch flag; which one depends on what is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass

HALF = ("float16", "bfloat16")
_MANTISSA = {"float32": 23, "bfloat16": 7, "float16": 10}

#: largest finite value of each dtype a draft can run in (torch.finfo(dtype).max) and its exponent range
#: (torch.finfo(dtype).maxexp): bfloat16 keeps float32's exponent range, float16 has 2^16. Here, not in
#: :mod:`eagle3_conformance.checks.runtime`, so the authoring verbs (``init``'s notes) read them without torch.
MAX_FINITE = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}
MAX_EXP = {"float16": 16, "bfloat16": 128, "float32": 128}


@dataclass(frozen=True)
class DtypeWords:
    """``title`` (one sentence), ``evidence`` and ``fix`` lines of a served dtype that is not the contract's."""

    title: str
    evidence: tuple[str, ...]
    fix: tuple[str, ...]


def served_dtype_words(declared: str, served: str, key: str = "precision.serving") -> DtypeWords:
    """What a target served in ``served`` where the contract's ``key`` declares ``declared`` means, and
    the two fixes (the contract key, or the server's ``--dtype``).

    Args:
        declared, served: dtype names (``float32``, ``bfloat16``, ``float16``); ``declared != served``.
        key: the contract key that declares it (``precision.serving``).

    Raises:
        ValueError: ``declared == served``.
    """
    if declared == served:
        raise ValueError(f"served dtype {served} is the contract's")
    title = f"the target was served in {served}; the contract declares {key}: {declared}"
    if served == "float32":
        why = (f"{served} rows are judged with {declared}'s noise allowances, wider than {served} needs (a small "
               f"fault can hide in them); the contract assumes {declared} serving, SGLang's and vLLM's dtype=auto "
               "for a float32 checkpoint on GPU, which `init` writes by default")
    elif declared == "float32":
        why = (f"{served} rows carry half-precision noise that {declared}'s gates read as faults (production_"
               "precision, row_fingerprint, magnitude fail on noise alone)")
    else:
        why = (f"the same width, another rounding: {served} keeps {_MANTISSA.get(served, '?')} mantissa bits, "
               f"{declared} {_MANTISSA.get(declared, '?')}; the gates allow {declared}'s noise")
    evidence = (f"the hidden states the draft received are {served} (the server's --dtype {served}); {key} is "
                f"{declared}", why)
    fix = (f"if {served} is what you deploy: set {key}: {served} in the contract (`eagle3-conformance init ... "
           f"--serving-dtype {served}` writes it) and judge again",
           f"if the contract is right: launch the server with --dtype {declared}"
           + (" (or --dtype auto: SGLang and vLLM serve a float32 checkpoint in float16 on GPU)"
              if declared == "float16" else ""))
    return DtypeWords(title, evidence, fix)
