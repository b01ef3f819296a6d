"""Reference capture: every boundary B_0..B_L and F from the target's own forward pass.

HF ``output_hidden_states`` returns L+1 tensors with ``hs[k] = B_k`` for k < L and
``hs[L] = F`` (transformers swaps in ``last_hidden_state``; docs/REFERENCE.md section 1),
so B_L has no HF index: it is taken with a forward pre-hook on the final norm's input. F is the
final norm's output.

Where and how (:class:`ReferenceModel` arguments, ``check-data --device/--dtype/--stream-layers``):

- ``device`` / ``dtype``: the forward runs on that torch device (``cpu``, ``cuda``, ``cuda:1``)
  with weights cast to that dtype (float32 default, bfloat16); boundaries are returned as float32
  on CPU whatever the compute dtype.
- ``stream_layers=True``: the model is built with empty (meta) parameters
  (``accelerate.init_empty_weights``, buffers such as rotary ``inv_freq`` real) and dispatched with
  ``accelerate.dispatch_model`` so that every decoder layer, the embedding and the final norm are
  "disk" modules whose weights are read from the checkpoint's own safetensors shards
  (``accelerate.utils.offload.OffloadedWeightsLoader`` index entries ``safetensors_file`` /
  ``weight_name``) right before that module's forward and dropped right after. Memory is one
  module's weights (the embedding or one decoder layer) plus the activations of the sequence;
  the forward is the model's own (``AutoModel`` base model, so no ``lm_head``), hence the same
  masks, rotary tables and layer code as the full load: B_0..B_L and F are identical.
- a disk cache (``cache_dir``, default ``<model cache root>/reference``): the boundaries of one
  token sequence are stored once as safetensors under a key of the model (config bytes, weight file
  names, sizes and mtimes), the compute dtype and device type, and read back by every later
  capture of the same tokens, in any process: the driver of a sharded scan fills it once and the
  Ray tasks read it (:func:`eagle3_conformance.scan.scan`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.contract.validation import target_mismatches
from eagle3_conformance.core.notation import Boundary, all_boundaries, boundary_row
from eagle3_conformance.environment import torch_env
from eagle3_conformance.environment.cache import write_json_atomically
from eagle3_conformance.environment.torch_env import DTYPE_NAMES, torch_dtype
from eagle3_conformance.reference.weights import MissingBoundary as MissingBoundary
from eagle3_conformance.reference.weights import ReferenceError as ReferenceError
from eagle3_conformance.reference.weights import missing_weights as missing_weights
from eagle3_conformance.reference.weights import weight_index as weight_index

torch_env.prepare()
import torch  # noqa: E402


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
        present: None (every boundary B_0..B_L, F: the transformers forward), or the boundaries
            this reference holds, in ``stack`` order (the engine as its own reference records only
            some: :mod:`eagle3_conformance.reference.engine`); then ``stack`` is [len(present), T, d]
            and a token row the engine did not record is NaN.
        source: which reference this is, for reports ("transformers" or "engine ...").
    """

    token_ids: torch.Tensor
    stack: torch.Tensor
    final_norm_weight: torch.Tensor
    final_norm_eps: float
    final_norm_kind: str
    num_layers: int
    present: Optional[list[Boundary]] = None
    source: str = "transformers"

    def boundary(self, b: Boundary | str) -> torch.Tensor:
        """[T, d] float32 tensor of boundary ``b``. Raises MissingBoundary: a partial reference
        (``present``) that did not record ``b``."""
        b = Boundary.parse(b)
        if self.present is None:
            return self.stack[boundary_row(b, self.num_layers)]
        try:
            return self.stack[self.present.index(b)]
        except ValueError:
            raise MissingBoundary(f"the {self.source} reference did not record {b} (it holds "
                                  f"{', '.join(map(str, self.present))})") from None

    @property
    def names(self) -> list[Boundary]:
        """The boundaries this reference holds, in ``stack`` order (all of B_0..B_L, F unless partial)."""
        return all_boundaries(self.num_layers) if self.present is None else list(self.present)

    @property
    def partial(self) -> bool:
        """True when only some boundaries were recorded (identity scans only those)."""
        return self.present is not None

    @cached_property
    def unit(self) -> torch.Tensor:
        """[L+2, T, d] float32: ``stack`` with every token row scaled to unit L2 norm (zero rows
        stay zero), computed once per reference so that per-slot cosine profiles are one product."""
        return torch.nn.functional.normalize(self.stack, dim=-1, eps=1e-8)

    @cached_property
    def neighbour_cosine(self) -> torch.Tensor:
        """[L+2, T] float32: at each token, the largest cosine between a boundary and any *other*
        boundary of this reference (how far the reference itself tells that boundary apart there;
        :func:`eagle3_conformance.checks.resolvable`). Computed once per reference."""
        u = self.unit
        g = torch.einsum("itd,jtd->tij", u, u)  # [T, L+2, L+2]
        g.diagonal(dim1=1, dim2=2).fill_(-2.0)
        return g.max(-1).values.T.contiguous()

    def effective_gamma(self) -> torch.Tensor:
        """The multiplier the final norm applies after normalising ([d] float32)."""
        return 1.0 + self.final_norm_weight if self.final_norm_kind == "rmsnorm_one_plus" else self.final_norm_weight


DTYPES = {name: torch_dtype(name) for name in DTYPE_NAMES}
"""Compute dtypes of the reference forward (``--dtype``)."""


def default_cache_dir() -> Path:
    """``<model cache root>/reference`` (:func:`eagle3_conformance.environment.cache.model_cache_root`)."""
    from eagle3_conformance.environment.cache import model_cache_root

    return model_cache_root() / "reference"


class ReferenceModel:
    """A target model loaded from an HF-format directory, producing :class:`Reference` objects.

    Args:
        model_dir: directory with ``config.json`` and safetensors weights (one file, or shards
            with ``model.safetensors.index.json``).
        final_norm_kind: how to read the final norm's weight (contract ``target.final_norm``).
        device: torch device of the forward ("cpu", "cuda", "cuda:0").
        dtype: compute dtype name, one of :data:`DTYPES` (weights are cast to it).
        stream_layers: load one module (embedding, one decoder layer, final norm) at a time from
            the safetensors shards (see the module docstring); memory is bounded by the largest
            module plus activations. The weights are not touched until the first capture.
        cache_dir: folder where captured boundaries are cached on disk (see the module
            docstring; :func:`default_cache_dir` is the usual one); None: memory cache only.

    Raises:
        ReferenceError: no config.json, no weights, missing shards, weights that do not load, an
            unknown dtype or an unusable device.
    """

    _norm: torch.nn.Module  # the final norm (input B_L, output F): set when the model loads

    def __init__(self, model_dir: str | Path, final_norm_kind: str = "rmsnorm", *, device: str = "cpu",
                 dtype: str = "float32", stream_layers: bool = False, cache_dir: Any = None):
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise ReferenceError(f"{self.model_dir}: no config.json (not an HF model directory)")
        why = missing_weights(self.model_dir)
        if why:
            raise ReferenceError(why)
        if dtype not in DTYPES:
            raise ReferenceError(f"dtype {dtype!r}: the reference forward runs in one of {sorted(DTYPES)}")
        try:
            self.device = torch.device(device)
            torch.empty(1, device=self.device)
        except (RuntimeError, AssertionError) as e:
            raise ReferenceError(f"device {device!r} cannot be used: {e}") from None
        self.dtype = dtype
        self.stream_layers = bool(stream_layers)
        self.final_norm_kind = final_norm_kind
        self.index = weight_index(self.model_dir)  # also refuses missing shards up front
        self.cache_dir = Path(cache_dir) if cache_dir else None
        from transformers import AutoConfig

        try:
            self.config = AutoConfig.from_pretrained(self.model_dir)
        except Exception as e:  # transformers raises many types; report them as one kind
            raise ReferenceError(f"{self.model_dir}: cannot read config.json: {e}") from None
        self.num_layers = int(self.config.num_hidden_layers)
        self.hidden_size = int(self.config.hidden_size)
        self._model: Optional[torch.nn.Module] = None
        self._cache: dict[tuple[int, ...], Reference] = {}
        self.forwards = 0  # forwards computed by this object
        self.disk_hits = 0  # captures read back from the disk cache

    # the model is loaded on the first capture that misses the disk cache
    @property
    def model(self) -> torch.nn.Module:
        """The loaded torch model: the ``*ForCausalLM`` (full load) or its base model (streamed)."""
        m = self.__dict__.get("_model")
        if m is None:
            m = self._model = self._load_streamed() if self.stream_layers else self._load_full()
            base = getattr(m, "model", m) if not self.stream_layers else m
            self._norm = base.norm
        return m

    @model.setter
    def model(self, m: torch.nn.Module) -> None:  # eagle3_conformance.faults.scenario wraps an in-memory model
        self._model = m
        self.__dict__.pop("_greedy", None)  # continuations of another model

    def _load_full(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        try:
            return AutoModelForCausalLM.from_pretrained(
                self.model_dir, dtype=DTYPES[self.dtype], use_safetensors=True).eval().to(self.device)
        except Exception as e:  # transformers raises many types; report them as one kind
            raise ReferenceError(f"{self.model_dir}: cannot load the model: {e}") from None

    def _load_streamed(self) -> torch.nn.Module:
        """The base model with meta parameters, dispatched module by module from the shards."""
        from accelerate import dispatch_model, init_empty_weights
        from transformers import AutoModel, AutoModelForCausalLM

        with init_empty_weights(include_buffers=False):
            model = AutoModel.from_config(self.config, dtype=DTYPES[self.dtype]).eval()
        prefix = getattr(AutoModelForCausalLM._model_mapping[type(self.config)], "base_model_prefix", "model") + "."
        index = {}
        for k, v in self.index.items():
            name = k[len(prefix):] if k.startswith(prefix) else k
            index[name] = {**v, "dtype": self.dtype}
        need = [n for n, p in model.named_parameters()]
        missing = [n for n in need if n not in index]
        if missing:
            raise ReferenceError(f"{self.model_dir}: the safetensors shards hold no tensor {prefix}{missing[0]} "
                                 f"({len(missing)} of the model's parameters missing)")
        device_map: dict[str, Any] = {}
        for name, child in model.named_children():
            if isinstance(child, torch.nn.ModuleList):
                for j, _ in enumerate(child):
                    device_map[f"{name}.{j}"] = "disk"
            elif any(True for _ in child.parameters()):
                device_map[name] = "disk"
            else:
                device_map[name] = str(self.device)
        model = model.to(self.device) if self.device.type != "cpu" else model
        import logging

        log = logging.getLogger("accelerate.big_modeling")  # "Some parameters are on the meta device": intended
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            return dispatch_model(model, device_map, main_device=str(self.device), offload_index=index)
        finally:
            log.setLevel(level)

    def model_key(self) -> str:
        """sha256 naming this model's boundaries in the disk cache: config.json bytes, every weight file's name,
        size and mtime, compute dtype, device type, final-norm kind, torch and transformers versions, this source."""
        import transformers

        h = hashlib.sha256((self.model_dir / "config.json").read_bytes() + Path(__file__).read_bytes())
        h.update(f"torch {torch.__version__}; transformers {transformers.__version__};".encode())
        for f in sorted({v["safetensors_file"] for v in self.index.values()}):
            st = os.stat(f)
            h.update(f"{Path(f).name}:{st.st_size}:{st.st_mtime_ns};".encode())
        h.update(f"{self.dtype};{self.device.type};{self.final_norm_kind}".encode())
        return h.hexdigest()[:24]

    def _cache_file(self, ids: torch.Tensor) -> Optional[Path]:
        root: Optional[Path] = getattr(self, "cache_dir", None)
        if root is None or getattr(self, "model_dir", None) is None:
            return None
        key = hashlib.sha256(ids.numpy().astype("<i8").tobytes()).hexdigest()[:32]
        return root / self.model_key() / f"{key}.safetensors"

    def _read_cached(self, path: Path, ids: torch.Tensor) -> Optional[Reference]:
        from safetensors.torch import load_file

        try:
            t = load_file(str(path))
        except Exception:  # a truncated or foreign file is recomputed, never trusted
            return None
        if "token_ids" not in t or not torch.equal(t["token_ids"], ids) or "stack" not in t:
            return None
        if tuple(t["stack"].shape) != (self.num_layers + 2, ids.numel(), self.hidden_size):
            return None
        return Reference(ids, t["stack"], t["final_norm_weight"], float(t["final_norm_eps"]),
                         self.final_norm_kind, self.num_layers)

    @staticmethod
    def _write_cached(path: Path, ref: Reference) -> None:
        from safetensors.torch import save_file

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            os.close(fd)
            save_file({"token_ids": ref.token_ids.contiguous(), "stack": ref.stack.contiguous(),
                       "final_norm_weight": ref.final_norm_weight.contiguous(),
                       "final_norm_eps": torch.tensor(ref.final_norm_eps, dtype=torch.float64)}, tmp)
            os.replace(tmp, path)  # atomic: concurrent tasks never read a partial file
        except OSError:
            pass  # a read-only cache only costs recomputation

    @torch.no_grad()  # type: ignore[untyped-decorator]  # torch is untyped (Any) where mypy runs: not installed
    def capture(self, token_ids: torch.Tensor | list[int]) -> Reference:
        """Run the target on one sequence and return every boundary.

        Args:
            token_ids: [T] token ids (T >= 1).

        Returns:
            A :class:`Reference` (stack float32 on CPU); results are cached per token sequence,
            in memory and in the disk cache.

        Raises:
            ReferenceError: no tokens, ids outside the vocabulary, or the forward fails.
        """
        ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1).cpu()
        if not ids.numel():
            raise ReferenceError("no tokens: the reference forward needs T >= 1")
        cfg = getattr(self, "config", None) or self.model.config
        vocab = int(cfg.vocab_size)
        bad = ((ids < 0) | (ids >= vocab)).nonzero().flatten()
        if bad.numel():
            j = int(bad[0])
            raise ReferenceError(f"token id {int(ids[j])} at token {j} is outside the reference model's "
                                 f"vocabulary ({vocab}); {bad.numel()} such ids")
        key = tuple(ids.tolist())
        if key in self._cache:
            return self._cache[key]
        path = self._cache_file(ids)
        ref = self._read_cached(path, ids) if path is not None and path.is_file() else None
        if ref is not None:
            self.disk_hits = getattr(self, "disk_hits", 0) + 1
        else:
            ref = self._forward(ids)
            self.forwards = getattr(self, "forwards", 0) + 1
            if path is not None:
                self._write_cached(path, ref)
        self._cache[key] = ref
        return ref

    def _forward(self, ids: torch.Tensor) -> Reference:
        model = self.model
        seen: dict[str, torch.Tensor] = {}

        def pre_hook(_mod: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            seen["B_L"] = args[0].detach().float().cpu()

        def post_hook(_mod: torch.nn.Module, _args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            seen["F"] = out.detach().float().cpu()

        h1 = self._norm.register_forward_pre_hook(pre_hook)
        h2 = self._norm.register_forward_hook(post_hook)
        dev = getattr(self, "device", torch.device("cpu"))
        try:
            if getattr(self, "stream_layers", False):  # base model: no lm_head
                out = model(input_ids=ids[None].to(dev), output_hidden_states=True, use_cache=False)
            else:
                # logits_to_keep=1: the boundaries are all that is read; the full [T, vocab] logits
                # cost ~15% of a 135M model's forward (more with a 262k vocabulary)
                out = model(input_ids=ids[None].to(dev), output_hidden_states=True, use_cache=False,
                            logits_to_keep=1)
        except ReferenceError:
            raise
        except Exception as e:  # a weight that cannot be read mid-stream, device OOM
            raise ReferenceError(f"{getattr(self, 'model_dir', 'model')}: the reference forward failed: "
                                 f"{type(e).__name__}: {e}") from None
        finally:
            h1.remove()
            h2.remove()
        hs = out.hidden_states
        L = self.num_layers
        if len(hs) != L + 1:
            raise ReferenceError(f"expected {L + 1} hidden states from HF, got {len(hs)}")
        rows = [hs[k][0].float().cpu() for k in range(L)] + [seen["B_L"][0], seen["F"][0]]
        return Reference(
            token_ids=ids,
            stack=torch.stack(rows),
            final_norm_weight=self.final_norm_weight(),
            final_norm_eps=float(getattr(self._norm, "variance_epsilon", getattr(self._norm, "eps", 1e-6))),
            final_norm_kind=self.final_norm_kind,
            num_layers=L,
        )

    def final_norm_weight(self) -> torch.Tensor:
        """gamma of the final norm, [d] float32 on CPU (from the shards when streamed)."""
        w = self._norm.weight
        if w.device.type == "meta":
            from safetensors import safe_open

            prefix = "norm.weight"
            name = next(k for k in self.index if k == prefix or k.endswith("." + prefix) and "layers" not in k)
            with safe_open(self.index[name]["safetensors_file"], framework="pt") as f:
                return f.get_tensor(self.index[name]["weight_name"]).to(DTYPES[self.dtype]).float().clone()
        return w.detach().float().cpu().clone()

    @torch.no_grad()  # type: ignore[untyped-decorator]  # torch is untyped (Any) where mypy runs: not installed
    def greedy_next(self, token_ids: list[int]) -> int:
        """The target's greedy next token after ``token_ids`` (argmax of the last row's logits).

        Cached per token sequence like :meth:`capture`: in this object (the model is immutable once loaded;
        the kill matrix's scenarios on one target ask for the same continuations) and, with a ``cache_dir``,
        on disk beside the boundaries (``greedy-<token ids' sha256>.json`` under the same model key: the
        model's files, dtype, device type, versions and this source). ``greedy_forwards`` counts the
        forwards this object ran for it.

        Raises:
            ReferenceError: the model is layer-streamed (no ``lm_head`` is loaded).
        """
        if getattr(self, "stream_layers", False):
            raise ReferenceError("greedy_next needs the lm_head: load the reference without stream_layers")
        key = tuple(int(t) for t in token_ids)
        memo: dict[tuple[int, ...], int] = self.__dict__.setdefault("_greedy", {})
        if key in memo:
            return memo[key]
        ids = torch.as_tensor(key, dtype=torch.long).reshape(-1)
        boundaries = self._cache_file(ids)
        path = None if boundaries is None else boundaries.with_name(f"greedy-{boundaries.stem}.json")
        got = _read_greedy(path, key) if path is not None else None
        if got is None:
            dev = getattr(self, "device", torch.device("cpu"))
            got = int(self.model(input_ids=ids[None].to(dev), use_cache=False).logits[0, -1].argmax())
            self.greedy_forwards = getattr(self, "greedy_forwards", 0) + 1
            if path is not None:
                write_json_atomically(path, {"token_ids": list(key), "next": got})  # read-only: recomputed next time
        memo[key] = got
        return got

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``embed_tokens(token_ids)`` as float32 [T, d] on CPU."""
        dev = getattr(self, "device", torch.device("cpu"))
        with torch.no_grad():
            return self.model.get_input_embeddings()(torch.as_tensor(token_ids).to(dev)).float().cpu()


_MODELS: dict[tuple[Any, ...], ReferenceModel] = {}


def _read_greedy(path: Path, key: tuple[int, ...]) -> Optional[int]:
    """The greedy token after ``key`` stored in ``path`` (beside the boundaries' file of the same token ids), or
    None (absent, unreadable, or stored for other ids)."""
    try:
        doc = json.loads(path.read_text())
        return int(doc["next"]) if doc.get("token_ids") == list(key) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None




def load_reference_model(model_dir: str | Path, target: Any = "rmsnorm", *, device: str = "cpu",
                         dtype: str = "float32", stream_layers: bool = False,
                         cache_dir: Optional[str | Path] = None) -> ReferenceModel:
    """Process-wide cached :class:`ReferenceModel` (models are immutable once loaded).

    Args:
        model_dir: HF-format target directory.
        target: the contract's ``target`` section (its ``final_norm`` is used, and the model's
            layer count, hidden size and vocabulary size must match it), or just a final-norm
            kind string.
        device, dtype, stream_layers, cache_dir: see :class:`ReferenceModel`.

    Raises:
        ReferenceError: the directory cannot be loaded, or its model is not the contract's target.
    """
    kind = target if isinstance(target, str) else target.final_norm
    key = (str(Path(model_dir).resolve()), kind, str(device), dtype, bool(stream_layers),
           str(cache_dir) if cache_dir else None)
    if key not in _MODELS:
        _MODELS[key] = ReferenceModel(model_dir, kind, device=device, dtype=dtype, stream_layers=stream_layers,
                                      cache_dir=cache_dir)
    model = _MODELS[key]
    if not isinstance(target, str):
        cfg = model.config
        got = {"num_hidden_layers": model.num_layers, "hidden_size": model.hidden_size,
               "vocab_size": int(getattr(cfg, "vocab_size", target.vocab_size))}
        archs = list(getattr(cfg, "architectures", None) or [])
        bad = [f"{k} {v} != contract target.{k} {want}" for k, v, want in target_mismatches(got, archs, target)]
        if bad:
            raise ReferenceError(f"{model_dir}: this reference model is not the contract's target: " + "; ".join(bad))
    return model


def rms(x: torch.Tensor) -> torch.Tensor:
    """Per-token RMS over the last dim: sqrt(mean(x**2)), float32 [...]."""
    return x.float().pow(2).mean(-1).sqrt()


