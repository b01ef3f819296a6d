"""Reference capture: every boundary B_0..B_L and F from the target's own forward pass.

HF ``output_hidden_states`` returns L+1 tensors with ``hs[k] = B_k`` for k < L and
``hs[L] = F`` (transformers swaps in ``last_hidden_state``; docs/REFERENCE.md section 1),
so B_L has no HF index: it is taken with a forward pre-hook on the final norm's input. F is the
final norm's output. Everything is computed in float32 on CPU unless asked otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

from conformance import torch_env
from conformance.notation import Boundary, all_boundaries, boundary_row

torch_env.prepare()
import torch  # noqa: E402


class ReferenceError(Exception):
    """The reference model directory cannot be used (missing config or weights, bad format)."""


@dataclass
class Reference:
    """All boundaries of one sequence.

    Attributes:
        token_ids: [T] int64.
        stack: [L+2, T, d] float32; rows 0..L are B_0..B_L, row L+1 is F.
        final_norm_weight: [d] float32 (gamma of the final RMSNorm).
        final_norm_eps: epsilon of the final norm.
        final_norm_kind: "rmsnorm" (x*w) or "rmsnorm_one_plus" (x*(1+w)).
        num_layers: L.
    """

    token_ids: torch.Tensor
    stack: torch.Tensor
    final_norm_weight: torch.Tensor
    final_norm_eps: float
    final_norm_kind: str
    num_layers: int

    def boundary(self, b: Boundary | str) -> torch.Tensor:
        """[T, d] float32 tensor of boundary ``b``."""
        b = Boundary.parse(b)
        return self.stack[boundary_row(b, self.num_layers)]

    @property
    def names(self) -> list[Boundary]:
        return all_boundaries(self.num_layers)

    @cached_property
    def unit(self) -> torch.Tensor:
        """[L+2, T, d] float32: ``stack`` with every token row scaled to unit L2 norm (zero rows
        stay zero), computed once per reference so that per-slot cosine profiles are one product."""
        return torch.nn.functional.normalize(self.stack, dim=-1, eps=1e-8)

    @cached_property
    def neighbour_cosine(self) -> torch.Tensor:
        """[L+2, T] float32: at each token, the largest cosine between a boundary and any *other*
        boundary of this reference (how far the reference itself tells that boundary apart there;
        :func:`conformance.checks.resolvable`). Computed once per reference."""
        u = self.unit
        g = torch.einsum("itd,jtd->tij", u, u)  # [T, L+2, L+2]
        g.diagonal(dim1=1, dim2=2).fill_(-2.0)
        return g.max(-1).values.T.contiguous()

    def effective_gamma(self) -> torch.Tensor:
        """The multiplier the final norm applies after normalising ([d] float32)."""
        if self.final_norm_kind == "rmsnorm_one_plus":
            return 1.0 + self.final_norm_weight
        return self.final_norm_weight


class ReferenceModel:
    """A target model loaded from an HF-format directory, producing :class:`Reference` objects.

    Args:
        model_dir: directory with ``config.json`` and safetensors weights.
        final_norm_kind: how to read the final norm's weight (contract ``target.final_norm``).

    Raises:
        ReferenceError: no config.json, no weights, or weights that do not load.
    """

    def __init__(self, model_dir: str | Path, final_norm_kind: str = "rmsnorm"):
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise ReferenceError(f"{self.model_dir}: no config.json (not an HF model directory)")
        if not any(self.model_dir.glob("*.safetensors")):
            raise ReferenceError(f"{self.model_dir}: no *.safetensors weights")
        from transformers import AutoModelForCausalLM

        try:
            self.model = AutoModelForCausalLM.from_pretrained(
                self.model_dir, dtype=torch.float32, use_safetensors=True
            ).eval()
        except Exception as e:  # transformers raises many types; report them as one kind
            raise ReferenceError(f"{self.model_dir}: cannot load the model: {e}") from None
        self.final_norm_kind = final_norm_kind
        self.num_layers = int(self.model.config.num_hidden_layers)
        self.hidden_size = int(self.model.config.hidden_size)
        self._norm = self.model.model.norm
        self._cache: dict[tuple[int, ...], Reference] = {}

    @torch.no_grad()
    def capture(self, token_ids: torch.Tensor | list[int]) -> Reference:
        """Run the target on one sequence and return every boundary.

        Args:
            token_ids: [T] token ids (T >= 1).

        Returns:
            A :class:`Reference`; results are cached per token sequence.
        """
        ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
        if not ids.numel():
            raise ReferenceError("no tokens: the reference forward needs T >= 1")
        vocab = int(self.model.get_input_embeddings().weight.shape[0])
        bad = ((ids < 0) | (ids >= vocab)).nonzero().flatten()
        if bad.numel():
            j = int(bad[0])
            raise ReferenceError(f"token id {int(ids[j])} at token {j} is outside the reference model's "
                                 f"vocabulary ({vocab}); {bad.numel()} such ids")
        key = tuple(ids.tolist())
        if key in self._cache:
            return self._cache[key]
        seen: dict[str, torch.Tensor] = {}

        def pre_hook(_mod, args):
            seen["B_L"] = args[0].detach().float()

        def post_hook(_mod, _args, out):
            seen["F"] = out.detach().float()

        h1 = self._norm.register_forward_pre_hook(pre_hook)
        h2 = self._norm.register_forward_hook(post_hook)
        try:
            # logits_to_keep=1: the boundaries are all that is read; the full [T, vocab] logits
            # cost ~15% of a 135M model's forward (more with a 262k vocabulary)
            out = self.model(input_ids=ids[None], output_hidden_states=True, use_cache=False, logits_to_keep=1)
        finally:
            h1.remove()
            h2.remove()
        hs = out.hidden_states
        L = self.num_layers
        if len(hs) != L + 1:
            raise ReferenceError(f"expected {L + 1} hidden states from HF, got {len(hs)}")
        rows = [hs[k][0].float() for k in range(L)] + [seen["B_L"][0], seen["F"][0]]
        ref = Reference(
            token_ids=ids,
            stack=torch.stack(rows),
            final_norm_weight=self._norm.weight.detach().float().clone(),
            final_norm_eps=float(getattr(self._norm, "variance_epsilon", getattr(self._norm, "eps", 1e-6))),
            final_norm_kind=self.final_norm_kind,
            num_layers=L,
        )
        self._cache[key] = ref
        return ref

    @torch.no_grad()
    def greedy_next(self, token_ids: list[int]) -> int:
        """The target's greedy next token after ``token_ids`` (argmax of the last row's logits)."""
        ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(1, -1)
        return int(self.model(input_ids=ids, use_cache=False).logits[0, -1].argmax())

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``embed_tokens(token_ids)`` as float32 [T, d]."""
        with torch.no_grad():
            return self.model.get_input_embeddings()(torch.as_tensor(token_ids)).float()


_MODELS: dict[tuple[str, str], ReferenceModel] = {}


def load_reference_model(model_dir: str | Path, target: Any = "rmsnorm") -> ReferenceModel:
    """Process-wide cached :class:`ReferenceModel` (models are immutable once loaded).

    Args:
        model_dir: HF-format target directory.
        target: the contract's ``target`` section (its ``final_norm`` is used, and the model's
            layer count, hidden size and vocabulary size must match it), or just a final-norm
            kind string.

    Raises:
        ReferenceError: the directory cannot be loaded, or its model is not the contract's target.
    """
    kind = target if isinstance(target, str) else target.final_norm
    key = (str(Path(model_dir).resolve()), kind)
    if key not in _MODELS:
        _MODELS[key] = ReferenceModel(model_dir, kind)
    model = _MODELS[key]
    if not isinstance(target, str):
        cfg = model.model.config
        got = {"num_hidden_layers": model.num_layers, "hidden_size": model.hidden_size,
               "vocab_size": int(getattr(cfg, "vocab_size", target.vocab_size))}
        bad = [f"{k} {v} != contract target.{k} {getattr(target, k)}" for k, v in got.items()
               if v != getattr(target, k)]
        archs = list(getattr(cfg, "architectures", None) or [])
        if archs and target.architecture not in archs:
            bad.append(f"architecture {archs[0]} != contract target.architecture {target.architecture}")
        if bad:
            raise ReferenceError(f"{model_dir}: this reference model is not the contract's target: " + "; ".join(bad))
    return model


def rms(x: torch.Tensor) -> torch.Tensor:
    """Per-token RMS over the last dim: sqrt(mean(x**2)), float32 [...]."""
    x = x.float()
    return x.pow(2).mean(-1).sqrt()


