"""``specforge``: what SpecForge 0.2.0's trainer hands its EAGLE-3 draft from offline data.

The pair's samples (the token ids and loss masks of its stored dataset) are written once in
SpecForge's offline layout from the target's forward (``rows_{g}-{g+2000}/data_{i}.ckpt``, one
sample ``.ckpt.gz``, rows captured two at a time so that short samples carry SpecForge's zero
padding at their end; :func:`eagle3_conformance.tools.specforge_loader.write_dataset`), cached beside
the pair's data. Then SpecForge's real offline loader chain reads them
(:class:`eagle3_conformance.tools.specforge_loader.SpecForgeLoader`: ``OfflineManifestReader`` ->
``LocalFeatureStore`` -> ``FeatureDataLoader(normalize_offline_sample, DataCollatorWithPadding)``
-> ``TargetHead.preprocess``): first every sample once in consecutive batches, then batch
compositions hypothesis draws. The captures hold exactly what the trainer hands the draft: aux
features, the F-based target, input ids, loss mask and positions after SpecForge's own shift.

Runs on contracts whose ``training.tool`` is ``specforge`` (their ``alignment`` states SpecForge's
pairing); other contracts are skipped with the reason, as the ``training`` path skips these.
"""

from __future__ import annotations

import json
from pathlib import Path as FsPath

from eagle3_conformance.paths.base import Needs, Path, Skipped, StoredData, stored_first, stored_observe

MAX_SAMPLES = 4
"""Samples of the pair's dataset written as SpecForge data (the path's time in the main job: the
real SmolLM2 pair's longest samples are 320 tokens)."""


def data_dir(c, pair) -> FsPath:
    """The pair's samples in SpecForge's offline layout, written once (atomically) beside the
    pair's own dataset: ``<data_dir>/../specforge-<version>-<K slots>/``."""
    from eagle3_conformance.environment import torch_env

    torch_env.prepare()
    import datasets
    import torch

    from eagle3_conformance.reference import ReferenceModel
    from eagle3_conformance.testbed.fixture_base import build_once
    from eagle3_conformance.tools import specforge_loader as sl

    dt = str(sl.capture_dtype(pair.target_dir)).replace("torch.", "")  # SpecForge captures in the checkpoint's dtype
    key = f"specforge-{sl.VERSION}-" + "-".join(c.capture.boundaries) + f"-{dt}-{MAX_SAMPLES}"
    out = FsPath(pair.data_dir).parent / key

    def build(stage: FsPath) -> None:
        datasets.disable_progress_bars()
        ds = datasets.load_from_disk(str(pair.data_dir))
        n = min(len(ds), MAX_SAMPLES)
        samples = [list(map(int, x)) for x in ds["input_ids"][:n]]
        masks = [list(map(int, x)) for x in ds["loss_mask"][:n]]
        ref = ReferenceModel(pair.target_dir, dtype=dt)
        with torch.inference_mode():
            sl.write_dataset(stage, ref.capture, samples, masks, aux=c.capture.boundaries, target="F",
                             checkpoint=pair.target_dir, batch_size=2, compress=(1,))  # stores the checkpoint's dtype
        (stage / "DONE").write_text(json.dumps({"samples": n, "writer": "eagle3_conformance.tools.specforge_loader"
                                                ".write_dataset"}) + "\n")

    return build_once(out, build)


def prepare(c, pair):
    from eagle3_conformance.tools import specforge_loader as sl

    if c.training.tool != "specforge":
        return Skipped(f"this contract's training data goes through {c.training.tool} (training.tool); the specforge "
                       "path reads contracts stating SpecForge's pairing")
    have = sl.installed_version()
    if c.training.version and have != c.training.version:
        return Skipped(f"the contract states SpecForge {c.training.version}'s pairing; specforge {have} is installed")
    loader = sl.SpecForgeLoader(data_dir(c, pair), c.draft.target_hidden_size)
    return StoredData(loader, len(loader))


PATH = Path(
    name="specforge",
    summary="SpecForge 0.2.0 OfflineManifestReader -> FeatureDataLoader(normalize_offline_sample) -> "
            "TargetHead.preprocess: aux features, F target, ids, loss mask after its shift",
    needs=Needs(modules=("specforge",), data=True),
    prepare=prepare,
    first=stored_first,
    observe=stored_observe,
)
