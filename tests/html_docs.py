"""Report documents for the HTML report's tests, written by hand in the shapes the verbs write
(faults --json, upgrade-check --format json, an acceptance block, an older findings report), and
a synthetic findings report of a deep target (L = 61, K = 3: Kimi-K2.5's shape) for the size budget
and the layout. Shared by tests/test_html_report.py and tests/test_html_browser.py."""

from __future__ import annotations

import math
import random


def profile(L: int, peak: int, rng: random.Random) -> list[float]:
    """A cosine profile over B_0..B_L, F peaking at column ``peak`` (falling off with distance)."""
    return [round(max(-0.05, math.exp(-abs(k - peak) / 3.0) - 0.05 * rng.random()), 4) for k in range(L + 2)]


def deep_report(L: int = 61, aux=(2, 30, 58), slot0_holds: int = 2, paths=("training", "sglang-extend", "sglang-decode"),
                samples: int = 32, seed: int = 0) -> dict:
    """A findings report of ``samples`` samples on ``paths`` whose slot 0 holds B_{slot0_holds}
    (the contract says B_{aux[0]}), with identity profiles as the checks record them."""
    rng = random.Random(seed)
    findings = []
    for path in paths:
        for s in range(samples):
            for i, b in enumerate(aux):
                holds = slot0_holds if i == 0 else b
                ok = holds == b
                findings.append({"check": "slot_identity", "status": "pass" if ok else "fail", "path": path,
                                 "slot": f"slot {i}", "expected": f"B_{b}", "observed": f"B_{holds}",
                                 "where": f"sample {s}", "message": "synthetic", "fault": "K2",
                                 "profile": {"cosine": profile(L, holds, rng), "tokens": 40,
                                             "over": "resolvable tokens"}})
            findings.append({"check": "verifier_identity", "status": "pass", "path": path, "slot": "verifier",
                             "expected": f"B_{L}", "observed": f"B_{L}", "where": f"sample {s}", "message": "synthetic",
                             "fault": "K4", "profile": {"cosine": profile(L, L, rng), "tokens": 40,
                                                        "over": "resolvable tokens"}})
    return {"contract": "contracts/kimi-k2.5--eagle3-mla.yaml", "diagnoses": [], "findings": findings,
            "meta": {"contract_name": "kimi-k2.5-eagle3-mla", "contract_sha256": "ab" * 32,
                     "reference": "/models/kimi-k2.5", "tool_versions": {"sglang": "0.5.23"}}}


KILL = {"pair": None, "paths": ["training", "sglang-extend"], "cells": [
    {"kind": "K1", "name": "capture ids ignored", "path": "training", "status": "caught", "checks": ["slot_identity"],
     "operators": [{"operator": "ids-ignored", "status": "caught", "check": "slot_identity", "detail": ""}]},
    {"kind": "K1", "name": "capture ids ignored", "path": "sglang-extend", "status": "n/a", "checks": [],
     "operators": [{"operator": "ids-ignored", "status": "n/a", "check": None, "detail": "no engine knob"}]},
    {"kind": "K2", "name": "index convention", "path": "training", "status": "missed", "checks": [],
     "operators": [{"operator": "embedding-prepended", "status": "missed", "check": None, "detail": "nothing failed"}]},
    {"kind": "K2", "name": "index convention", "path": "sglang-extend", "status": "not run", "checks": [],
     "operators": [{"operator": "embedding-prepended", "status": "not run", "check": None,
                    "detail": "SGLang is not installed"}]}],
    "false_positives": [], "timings": {"total": 1.0}}

UPGRADE = {"baseline": "sglang==0.5.12", "candidates": ["sglang==0.5.13"], "exit_code": 1, "seconds": 0.5,
           "sources": [{"column": "sglang==0.5.12", "wheel": "sglang-0.5.12.whl", "sha256": "1" * 64, "files": 3,
                        "fetch_seconds": 0.0, "error": ""}],
           "contracts": [{"contract": "contracts/kimi.yaml", "name": "kimi-k2.5", "method": "eagle3",
                          "architecture": "KimiK25", "num_hidden_layers": 61, "error": "",
                          "captures": [
                              {"column": "sglang==0.5.12", "status": "ok", "reader": "r", "ids_read": [1, 29, 57],
                               "steps": {"extend": {"boundaries": ["B_2", "B_30", "B_58"], "slot_ids": [1, 29, 57],
                                                    "rule": "deepseek_v2.py:2710 layers_to_capture = [i + 1 ...]",
                                                    "dropped": []}}, "error": "", "notes": []},
                              {"column": "sglang==0.5.13", "status": "ok", "reader": "r", "ids_read": [1, 29, 57],
                               "steps": {"extend": {"boundaries": ["B_1", "B_30", "B_58"], "slot_ids": [1, 29, 57],
                                                    "rule": "deepseek_v2.py:2733 layers_to_capture = layer_ids",
                                                    "dropped": []}}, "error": "", "notes": []}],
                          "verdicts": [{"base": "sglang==0.5.12", "to": "sglang==0.5.13", "status": "different tensors",
                                        "reason": "", "changes": [
                                            {"step": "extend", "slot": 0, "from_boundary": "B_2", "to_boundary": "B_1",
                                             "from_id": 1, "to_id": 1, "from_rule": "deepseek_v2.py:2710",
                                             "to_rule": "deepseek_v2.py:2733"}]}]}]}

ACCEPTANCE = {"acceptance": {"label": "trained draft", "mean_accept_length": 2.41, "interval": [2.2, 2.6],
                             "confidence": 0.95,
                             "per_position": [{"position": 1, "rate": 0.62, "interval": [0.55, 0.69]},
                                              {"position": 2, "rate": 0.41, "interval": [0.33, 0.49]},
                                              {"position": 3, "rate": 0.25, "interval": [0.18, 0.31]}],
                             "gate_floor": {"mean_accept_length": 2.0, "per_position": [0.5, 0.3, 0.15]},
                             "baseline": {"label": "seed fault", "mean_accept_length": 1.3, "interval": [1.2, 1.4],
                                          "per_position": [0.33, 0.01, 0.0]}}}
