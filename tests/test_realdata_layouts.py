"""SpecForge's real offline layout (issue 23 item 2): what ``scripts/prepare_hidden_states.py`` leaves in
its output directory besides the samples (``vocab_mapping/vocab_mapping.pt``, written by SpecForge's own
``generate_vocab_mapping_file``), a ``.ckpt.gz`` sample, a sample never written because it held a NaN
(the script skips it), and a stray ``.lock`` file. ``check-offline`` reads the directory through
SpecForge's own loader chain, counts every sample and lists every other entry as skipped with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import tree_digest

from eagle3_conformance.cli import main
from eagle3_conformance.tools import specforge_loader as sl

REPO = Path(__file__).resolve().parent.parent
SF_TINY = REPO / "contracts" / "tiny-llama-specforge.yaml"
AUX = ["B_2", "B_4", "B_5"]


@pytest.fixture(scope="module")
def sf_real(tmp_path_factory, tiny, tiny_ref):
    import datasets

    ds = datasets.load_from_disk(str(tiny.data_dir))
    keep = [i for i in range(len(ds)) if len(ds[i]["input_ids"]) >= 4][:5]
    ids = [list(map(int, ds[i]["input_ids"])) for i in keep]
    masks = [list(map(int, ds[i]["loss_mask"])) for i in keep]

    def nan_in_sample_3(ref, hs):  # the capture of one sample overflowed: the script does not save it
        return hs.clone().fill_(float("nan")) if list(map(int, ref.token_ids)) == ids[3] else hs

    out = tmp_path_factory.mktemp("sfreal") / "data"
    sl.write_dataset(out, tiny_ref.capture, ids, masks, aux=AUX, checkpoint=tiny.target_dir, compress=(1,),
                     hs_transform=nan_in_sample_3,
                     vocab=(tiny.spec["target"]["vocab_size"], 64))
    (out / "rows_0-2000" / "data_0.ckpt.lock").write_text("")
    return out


def test_the_writer_imitates_prepare_hidden_states(sf_real):
    names = sorted(p.relative_to(sf_real).as_posix() for p in sf_real.rglob("*") if p.is_file())
    assert names == ["rows_0-2000/data_0.ckpt", "rows_0-2000/data_0.ckpt.lock", "rows_0-2000/data_1.ckpt.gz",
                     "rows_0-2000/data_2.ckpt", "rows_0-2000/data_4.ckpt", "vocab_mapping/vocab_mapping.pt"]
    m = torch.load(sf_real / "vocab_mapping" / "vocab_mapping.pt", weights_only=True)
    assert set(m) == {"d2t", "t2d"} and m["d2t"].shape == (64,)


def test_check_offline_counts_every_sample_and_lists_the_rest(sf_real, tmp_path):
    out = tmp_path / "f.json"
    before = tree_digest(sf_real)
    rc = main(["check-offline", str(SF_TINY), "--files", str(sf_real), "--quiet", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert rc == 0, [f["message"] for f in doc["findings"] if f["status"] == "fail"][:3]
    assert tree_digest(sf_real) == before
    avail = [f for f in doc["findings"] if f["check"] == "sample_available"]
    assert len(avail) == 4 and all(f["status"] == "pass" for f in avail)  # the .ckpt.gz one included
    assert any("data_1.ckpt.gz" in f["where"] for f in avail)
    files = [f for f in doc["findings"] if f["check"] == "data_files"]
    assert len(files) == 1 and files[0]["status"] == "skip"
    msg = files[0]["message"]
    assert "vocab_mapping/ (SpecForge's vocab mapping" in msg and "data_0.ckpt.lock (a lock file)" in msg


def test_a_nan_sample_that_was_written_is_named(sf_real, tmp_path, tiny_ref):
    """A sample holding a NaN (written by another writer, not SpecForge's) fails naming that sample."""
    import shutil

    d = tmp_path / "d"
    shutil.copytree(sf_real, d)
    x = torch.load(d / "rows_0-2000" / "data_2.ckpt", weights_only=True)
    x["aux_hidden_state"][0, 1, 0] = float("nan")
    (d / "rows_0-2000" / "data_2.ckpt").unlink()
    sl.save_sample(d / "rows_0-2000" / "data_2.ckpt", x)
    out = tmp_path / "f.json"
    assert main(["check-offline", str(SF_TINY), "--files", str(d), "--quiet", "--json", str(out)]) == 1
    bad = [f for f in json.loads(out.read_text())["findings"] if f["status"] == "fail"]
    assert bad and all("data_2.ckpt" in f["where"] for f in bad if f["check"] == "finite"), bad[:2]
    assert any(f["check"] == "finite" for f in bad)


def test_the_projects_reader_names_what_it_does_not_read(sf_real, tmp_path):
    """A speculators-format contract reads the directory with the project's reader (.pt/.ckpt): the
    .ckpt.gz sample and the vocab mapping are named as not read, never read as samples or skipped silently."""
    out = tmp_path / "f.json"
    main(["check-offline", str(REPO / "contracts" / "tiny-llama.yaml"), "--files", str(sf_real), "--quiet",
          "--json", str(out)])
    doc = json.loads(out.read_text())
    avail = [f for f in doc["findings"] if f["check"] == "sample_available"]
    assert not any("vocab_mapping" in f["where"] for f in avail)
    skipped = [f for f in doc["findings"] if f["check"] == "data_files" and f["status"] == "skip"]
    assert len(skipped) == 1 and "data_1.ckpt.gz" in skipped[0]["message"]
    assert "vocab_mapping/vocab_mapping.pt" in skipped[0]["message"]


# --- the stored dtype is the checkpoint's, by the writer itself (issue 23, left item 3) ---------------


def _stored_dtypes(d: Path) -> set:
    from eagle3_conformance.tools.specforge_loader import safe_load_feature_file

    return {str(safe_load_feature_file(str(p))[k].dtype) for p in d.rglob("data_*.ckpt*") if not p.name.endswith(".lock")
            for k in ("hidden_state", "aux_hidden_state")}


def test_the_writer_stores_the_checkpoints_dtype_as_specforge(sf_real, tiny):
    """SpecForge 0.2.0's prepare_hidden_states.py: build_target_model(torch_dtype=AutoConfig(target).dtype)
    and _save_tensor_sync saves the captured tensors as they are; the float32 tiny-llama checkpoint's
    data is float32 with no dtype argument from the caller."""
    from eagle3_conformance.tools.specforge_loader import capture_dtype

    assert capture_dtype(tiny.target_dir) == torch.float32
    assert _stored_dtypes(sf_real) == {"torch.float32"}


@pytest.fixture(scope="module")
def bf16_target(tiny, tmp_path_factory):
    """The tiny-llama target saved as a bfloat16 checkpoint (config torch_dtype bfloat16)."""
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("t16") / "target"
    AutoModelForCausalLM.from_pretrained(str(tiny.target_dir), dtype=torch.bfloat16).save_pretrained(str(out))
    return out


def test_a_bf16_checkpoint_written_by_the_specforge_writer_conforms_with_the_contract_init_writes(
        bf16_target, tiny, tmp_path):
    """A bfloat16 checkpoint captured as SpecForge does (a bf16 forward, stored bf16 by the writer itself)
    conforms under the contract ``init --engine specforge`` writes for it (precision.training and
    data_dtype bfloat16), with the new precision gates."""
    import datasets

    from eagle3_conformance.contract import load_contract
    from eagle3_conformance.reference import ReferenceModel

    ds = datasets.load_from_disk(str(tiny.data_dir))
    keep = [i for i in range(len(ds)) if len(ds[i]["input_ids"]) >= 4][:6]
    ids = [list(map(int, ds[i]["input_ids"])) for i in keep]
    masks = [list(map(int, ds[i]["loss_mask"])) for i in keep]
    data = sl.write_dataset(tmp_path / "data", ReferenceModel(bf16_target, dtype="bfloat16").capture, ids, masks,
                            aux=AUX, checkpoint=bf16_target, batch_size=2, compress=(1,))
    assert _stored_dtypes(data) == {"torch.bfloat16"}
    con = tmp_path / "c.yaml"
    assert main(["init", "--target", str(bf16_target), "--draft", str(tiny.draft_dir), "--engine", "specforge",
                 "-o", str(con)]) == 0
    c = load_contract(con)
    assert (c.target.dtype, c.precision.training, c.data_dtype) == ("bfloat16", "bfloat16", "bfloat16")
    assert "SpecForge 0.2.0 stores what its SGLang capture computes in" in next(ln for ln in con.read_text().splitlines() if ln.startswith("data_dtype:"))
    out = tmp_path / "r.json"
    rc = main(["check-offline", str(con), "--files", str(data), "--quiet", "--json", str(out),
               "--reference", str(bf16_target)])
    doc = json.loads(out.read_text())
    assert rc == 0, [f["message"] for f in doc["findings"] if f["status"] == "fail"][:3]
    avail = [f for f in doc["findings"] if f["check"] == "sample_available"]
    assert len(avail) == 6 and all(f["status"] == "pass" for f in avail)
    pp = [f for f in doc["findings"] if f["check"] == "production_precision"]
    assert len(pp) == 6 and all(f["status"] == "pass" for f in pp)
