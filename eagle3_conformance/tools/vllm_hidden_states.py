"""vLLM's hidden-state extraction files: what ``ExampleHiddenStatesConnector`` writes per request.

vLLM 0.33.0 with ``speculative_config={"method": "extract_hidden_states", ...}`` stacks the
captured states along dim 1 in capture order (ascending ids: ``v1/spec_decode/
extract_hidden_states.py:129-133``) and its example connector
(``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py:359-436``) writes one
safetensors file per request, ``{req_id}.safetensors``, holding

* ``hidden_states`` [T, N, H]: raw B_k of the N listed ids (no fc, no norm), model dtype;
* ``token_ids`` [T] int: the request's prompt tokens.

speculators' data generation moves each file to ``hs_{idx}.safetensors`` (its own dataset format
then adds the Arrow table with loss masks); a directory of raw connector output has no loss mask
and no shift. The ids are the extract config's top-level ``eagle_aux_hidden_state_layer_ids``,
which speculators' launcher writes as the aux ids plus L (``scripts/launch_vllm.py:69-143``), so
a file holds the contract's K aux slots, then B_L when N = K + 1.

Read with ``safetensors.safe_open`` only (no pickle, nothing executed); files are opened
read-only and never written. A bad file (not safetensors, truncated, keys missing, wrong rank,
lengths that disagree, non-integer ids) becomes an unavailable
:class:`eagle3_conformance.core.capture.Capture` naming the file, reported as a failed ``sample_available``
finding; it never raises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from eagle3_conformance.environment import torch_env
from eagle3_conformance.environment.torch_env import torch_dtype

torch_env.prepare()
import torch  # noqa: E402

from eagle3_conformance.tools.shared.fp8_payload import SCALES_KEY  # noqa: E402  (hs-connectors' FP8 scales key)
from eagle3_conformance.tools.shared.vllm_files import PATH as PATH  # noqa: E402
from eagle3_conformance.tools.shared.vllm_files import SUFFIX as SUFFIX  # noqa: E402
from eagle3_conformance.tools.shared.vllm_files import find_files as find_files  # noqa: E402


def read(path: Path) -> tuple[Optional[dict], Optional[str]]:
    """``{"hidden_states": [T, N, H], "token_ids": [T], "hidden_states_scales": [T, 1, 1] or None}``
    or (None, why not), never raising."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            keys = set(f.keys())
            missing = [k for k in ("hidden_states", "token_ids") if k not in keys]
            if missing:
                return None, (f"{path.name}: not a vLLM hidden-states file: no {missing} "
                              f"(keys {sorted(keys)})")
            hs, ids = f.get_tensor("hidden_states"), f.get_tensor("token_ids")
            scales = f.get_tensor(SCALES_KEY) if SCALES_KEY in keys else None
    except Exception as e:
        return None, f"{path.name} could not be read as safetensors: {type(e).__name__}: {' '.join(str(e).split())}"
    if hs.dim() != 3:
        return None, f"{path.name}: hidden_states is {list(hs.shape)}, expected [T, N, H]"
    if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        return None, f"{path.name}: token_ids is {list(ids.shape)} {str(ids.dtype).replace('torch.', '')}, expected [T] integers"
    if int(ids.shape[0]) != int(hs.shape[0]):
        return None, f"{path.name}: token_ids holds {ids.shape[0]} tokens but hidden_states {hs.shape[0]} rows"
    if not hs.is_floating_point():
        return None, f"{path.name}: hidden_states are {str(hs.dtype).replace('torch.', '')}, not floating point"
    return {"hidden_states": hs, "token_ids": ids.long(), SCALES_KEY: scales}, None




def _name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def load_capture(path: str | Path, contract, index: Optional[int] = None, name: Optional[str] = None):
    """One connector file as a :class:`~eagle3_conformance.core.capture.Capture` against ``contract``.

    ``name``: how findings name the file (default its file name; check-data passes the path
    relative to the data directory).

    FP8 payloads (hs-connectors' ``FP8HiddenStatesConnector``: float8 ``hidden_states`` and float32
    ``hidden_states_scales`` [T, 1, 1]) are read as the contract's ``training.transfer`` says: ``fp8``
    dequantises with hs-connectors' own ``dequantize_fp8_tensor`` to ``data_dtype`` (what
    ``FP8Transfer(dequantize_dtype=...)`` does, hs_connectors/transfer.py:212-248); ``file`` keeps the
    stored values (``FileTransfer``). Provenance ``transfer`` (the backend) and ``payload`` (the file's
    ``dtype``, ``shape``, ``scales`` shape, ``scales_dtype``, ``bad_scale``: the first token whose scale is
    not > 0, :func:`eagle3_conformance.tools.shared.fp8_payload.bad_scale`) let ``transfer_backend`` and ``fp8_scale_error``
    judge the file as they judge speculators' training data. Scales that are not [T, 1, 1] floats under
    ``transfer: fp8`` -> an unavailable capture naming the file (``FP8Transfer`` cannot apply them).

    ``feature`` [R, K*H] is the first K planes concatenated (K = the contract's aux count) for the
    rows ``rows`` [R] that survive the contract's pairing (as :mod:`eagle3_conformance.tools.offline_files`
    pairs unshifted files: the verifier, input id and position at ``alignment.target`` /
    ``input_token`` / ``position``); when N = K + 1 the last plane is the verifier state
    (``verifier_last`` [R, H]), else None. No loss mask (the connector writes none). N not K or
    K + 1 -> an unavailable capture naming both counts.
    """
    from eagle3_conformance.core.capture import Capture

    path = Path(path)
    where = f"{path.name}" if index is None else f"sample {index} ({path.name})"
    K = len(contract.aux)
    empty = torch.zeros(0, dtype=torch.long)

    def unavailable(reason: str):
        return Capture(PATH, where, empty, torch.zeros(0, contract.capture.feature_width), empty.clone(),
                       unavailable=reason, provenance={"file": str(path)}, stored=True)

    t, why = read(path)
    if why:
        return unavailable(why)
    assert t is not None  # read gives the tensors or why not
    from eagle3_conformance.tools.shared import fp8_payload

    hs, ids, scales = t["hidden_states"], t["token_ids"], t[SCALES_KEY]
    T, N, H = (int(x) for x in hs.shape)
    transfer = contract.training.transfer
    payload = fp8_payload.payload(name or path.name, hs, scales)
    if transfer == "fp8" and scales is not None:
        if list(scales.shape) != [T, 1, 1] or not scales.is_floating_point():
            return unavailable(f"{path.name}: {SCALES_KEY} is {list(scales.shape)} {_name(scales)}, expected "
                               f"[T, 1, 1] = [{T}, 1, 1] float32 (one scale per token)")
        from hs_connectors.fp8_utils import dequantize_fp8_tensor

        hs = dequantize_fp8_tensor(hs, scales, dtype=torch_dtype(contract.data_dtype))  # FP8Transfer._dequantize
    # what the trainer's reader hands over (as speculators_loader records it); the stored dtype is in payload
    on_disk = _name(hs)
    if N not in (K, K + 1):
        return unavailable(f"{path.name}: hidden_states holds {N} planes; the contract has {K} aux slots "
                           f"(expected {K}, or {K + 1} with B_L last)")
    a = contract.alignment
    offs = [a.input_token, a.target]
    # the file is unshifted; the trainer pairs row t with the verifier, input id and position at the
    # contract's offsets, and row t survives when every paired index lies inside the sequence
    rows = torch.tensor([r for r in range(T) if all(0 <= r + o < T for o in offs)], dtype=torch.long)
    feature = hs[:, :K].reshape(T, K * H)
    verifier = hs[:, K] if N == K + 1 else None
    return Capture(
        path=PATH, where=where, token_ids=ids, stored=True,
        feature=feature[rows],
        rows=rows,
        verifier_last=None if verifier is None else verifier[rows + a.target],
        draft_input_ids=ids[rows + a.input_token],
        position_ids=rows + a.position,
        provenance={"file": str(path), "format": "vLLM extract_hidden_states connector", "planes": N,
                    "on_disk_dtype": on_disk, "payload": payload, "transfer": transfer,
                    "loader": "safetensors.safe_open" + (" + hs_connectors.fp8_utils.dequantize_fp8_tensor"
                                                         if transfer == "fp8" and scales is not None else "")
                              + "; pairing at the contract's alignment offsets (no loss mask in the connector's file)"},
    )
