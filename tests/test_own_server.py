"""The user's own SGLang server (docs/own-server.md): serve-hooks / check-captures, the records-only
attribution of rows (tools/sglang_engine/captures.py ``attribute``), and bad input: a directory from
another contract, pair or SGLang release, a server that never ran the hooks or matched no module.

The real HTTP server runs in tests/test_own_server_live.py (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eagle3_conformance.cli import main
from eagle3_conformance.tools.sglang_engine.captures import attribute

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "smollm2-135m.yaml"


def _t(xs):
    return torch.tensor(xs, dtype=torch.int64)


def target_extend(rps, ids, pos, locs, prefix_locs=()):
    lens = [len(x) for x in ids]
    return dict(role="target", mode="EXTEND", input_ids=_t(sum(ids, [])), positions=_t(sum(pos, [])),
                req_pool_indices=_t(rps), seq_lens=_t([p[-1] + 1 for p in pos]), extend_seq_lens=_t(lens),
                layers_to_capture=[2, 15, 27], out_cache_loc=_t(sum(locs, [])),
                extend_prefix_lens=_t([p[0] for p in pos]), prefix_locs=_t(list(prefix_locs)))


def draft_extend(rps, ids, pos, width=6):
    n = sum(len(x) for x in ids)
    h = torch.randn(n, width)
    return dict(role="draft", mode="EXTEND", input_ids=_t(sum(ids, [])), positions=_t(sum(pos, [])),
                req_pool_indices=_t(rps), seq_lens=_t([p[-1] + 1 for p in pos]),
                extend_seq_lens=_t([len(x) for x in ids]), hidden=h, fc_input=h.clone(), num_accept_tokens=None)


def verify(rps, ids, pos, locs):
    return dict(role="target", mode="TARGET_VERIFY", input_ids=_t(sum(ids, [])), positions=_t(sum(pos, [])),
                req_pool_indices=_t(rps), seq_lens=_t([p[0] for p in pos]), extend_seq_lens=None,
                layers_to_capture=[2, 15, 27], out_cache_loc=_t(sum(locs, [])))


def draft_after_verify(rps, n, accepted, width=6):
    h = torch.randn(n * len(rps), width)
    return dict(role="draft", mode="DRAFT_EXTEND_V2", input_ids=_t([0] * n * len(rps)),
                positions=_t([0] * n * len(rps)), req_pool_indices=_t(rps), seq_lens=_t([0] * len(rps)),
                extend_seq_lens=None, hidden=h, fc_input=h.clone(), num_accept_tokens=_t(accepted))


def _session():
    """Request A [10..13] at slot 0; one verify (2 accepted); then request B at slot 1 whose first 2
    tokens came from the radix cache (A's KV slots 100, 101)."""
    return [
        target_extend([0], [[10, 11, 12, 13]], [[0, 1, 2, 3]], [[100, 101, 102, 103]]),
        draft_extend([0], [[11, 12, 13, 50]], [[0, 1, 2, 3]]),
        verify([0], [[50, 51, 52, 53]], [[4, 5, 6, 7]], [[104, 105, 106, 107]]),
        draft_after_verify([0], 4, [2]),
        verify([0], [[60, 61, 62, 63]], [[6, 7, 8, 9]], [[106, 107, 108, 109]]),
        draft_after_verify([0], 4, [1]),
        target_extend([1], [[20, 21]], [[2, 3]], [[200, 201]], prefix_locs=[100, 101]),
        draft_extend([1], [[21, 70]], [[2, 3]]),
    ]


def test_rows_are_attributed_from_the_records_alone():
    att = attribute(_session())
    assert att.unattributed == []
    assert [c.token_ids.tolist() for c in att.extend] == [[10, 11, 12, 13], [10, 11, 20, 21]]
    assert [c.rows.tolist() for c in att.extend] == [[0, 1, 2, 3], [2, 3]]
    # the second verify starts after the 2 tokens the first committed: its prefix is A + [50, 51]
    assert [c.token_ids.tolist() for c in att.decode] == [[10, 11, 12, 13, 50, 51, 52, 53],
                                                         [10, 11, 12, 13, 50, 51, 60, 61, 62, 63]]
    assert [c.provenance["accepted"] for c in att.decode] == [2, 1]
    assert att.modes == {"target EXTEND": 2, "draft EXTEND": 2, "target TARGET_VERIFY": 2, "draft DRAFT_EXTEND_V2": 2}


def test_engine_mapping_on_records_says_the_ids_were_not_recorded_never_its_defaults():
    """The records carry the target's layers_to_capture, not the ids the engine read from the draft
    config: engine_mapping must not claim the engine used its defaults (it did not say so)."""
    from eagle3_conformance.checks.draft_fc import check_engine_mapping
    from eagle3_conformance.contract import load_contract

    c = load_contract(CONTRACT)
    cap = attribute(_session()).extend[0]
    (f,) = check_engine_mapping(c, cap)
    assert f.status == "pass" and "its defaults" not in f.message and "not recorded" in f.message, f.message
    assert "layers_to_capture" in f.message and "['B_2', 'B_15', 'B_27']" in f.message, f.message


def test_a_prefix_no_record_wrote_is_named_never_guessed():
    recs = _session()
    recs[6]["prefix_locs"] = _t([100, 999])  # slot 999: written by no record read here
    att = attribute(recs)
    assert len(att.extend) == 1
    whys = [why for _, why in att.unattributed]
    assert any("cached prefix" in w for w in whys) and any("not attributed" in w for w in whys)


def test_a_broken_record_untrusts_what_came_before_it():
    recs = _session()
    recs[4] = {"broken": "x.pt", "error": "EOFError"}  # the second target verify is unreadable
    att = attribute(recs)
    assert len(att.decode) == 1  # the draft extend after it has no verify to pair with: named
    assert any("no target verify" in why for _, why in att.unattributed)


def test_draft_ids_that_are_not_the_targets_tokens_are_named():
    recs = _session()
    recs[1]["input_ids"] = _t([11, 99, 13, 50])  # the draft got another token at position 1
    att = attribute(recs)
    assert len(att.extend) == 1 and "shifted ids" in att.unattributed[0][1]


# ---- serve-hooks / check-captures: bad input, each exit 2 naming the cause -------------------------------------

def _prepared(tmp_path) -> Path:
    d = tmp_path / "caps"
    assert main(["serve-hooks", "--contract", str(CONTRACT), "--out", str(d)]) == 0
    return d


def _factory(d: Path, version="0.5.23"):
    (d / "factory-4242-0.json").write_text(json.dumps({"pid": 4242, "sglang_version": version}))


def _model(d: Path, layers=30, width=576):
    (d / "model-4242-target.json").write_text(json.dumps({
        "pid": 4242, "role": "target", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers,
        "hidden_size": width, "vocab_size": 49152, "layers_to_capture": [2, 15, 27]}))


def test_serve_hooks_prints_the_value_sglang_parses(tmp_path, capsys):
    d = _prepared(tmp_path)
    value = capsys.readouterr().out.strip()
    from sglang.srt.server_args import json_list_type  # the parser of --forward-hooks

    spec = json_list_type(value)[0]
    assert spec["hook_factory"] == "eagle3_conformance.tools.sglang_engine.server_hooks:server_recorder"
    assert spec["config"]["out_dir"] == str(d.resolve()) and spec["target_modules"] == ["model", "model.fc"]
    m = json.loads((d / "manifest.json").read_text())
    assert m["sglang_expected"] == "0.5.23" and len(m["contract_sha256"]) == 64
    assert main(["serve-hooks", "--contract", str(CONTRACT), "--out", str(d)]) == 0  # rerun before serving: fine
    _factory(d)
    assert main(["serve-hooks", "--contract", str(CONTRACT), "--out", str(d)]) == 2  # holds records: refused


def test_serve_hooks_refuses_a_directory_holding_anything_else(tmp_path, capsys):
    """The server writes its records into --out and check-captures reads it whole: a directory of
    the user's own files (a typo'd --out ~) is refused, naming what it holds, and left as it was."""
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    assert main(["serve-hooks", "--contract", str(CONTRACT), "--out", str(d)]) == 2
    assert "not empty (holds notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]


def test_a_server_that_never_ran_the_hooks(tmp_path, capsys):
    d = _prepared(tmp_path)
    capsys.readouterr()
    assert main(["check-captures", str(d), "--contract", str(CONTRACT)]) == 2
    assert "never called the hook factory" in capsys.readouterr().err


def test_a_server_whose_modules_matched_no_pattern(tmp_path, capsys):
    d = _prepared(tmp_path)
    _factory(d)
    capsys.readouterr()
    assert main(["check-captures", str(d), "--contract", str(CONTRACT)]) == 2
    err = capsys.readouterr().err
    assert "No modules matched hook spec 'eagle3-conformance-draft-input' patterns=['model', 'model.fc']" in err


def test_another_sglang_release(tmp_path, capsys):
    d = _prepared(tmp_path)
    _factory(d, "0.5.24")
    _model(d)
    capsys.readouterr()
    assert main(["check-captures", str(d), "--contract", str(CONTRACT)]) == 2
    assert "recorded by SGLang 0.5.24; these hooks know SGLang 0.5.23" in capsys.readouterr().err


@pytest.mark.parametrize("layers,width", [(24, 576), (30, 960)])
def test_another_pair(tmp_path, capsys, layers, width):
    d = _prepared(tmp_path)
    _factory(d)
    _model(d, layers, width)
    capsys.readouterr()
    assert main(["check-captures", str(d), "--contract", str(CONTRACT)]) == 2
    err = capsys.readouterr().err
    assert f"model-4242-target.json: the server's target has {layers} layers x {width}" in err
    assert "the contract's target is 30 x 576" in err


def test_another_contract(tmp_path, capsys):
    d = _prepared(tmp_path)
    other = tmp_path / "other.yaml"
    other.write_text(CONTRACT.read_text().replace("name: smollm2-135m-eagle3", "name: other-pair"))
    capsys.readouterr()
    assert main(["check-captures", str(d), "--contract", str(other)]) == 2
    assert "recorded for the contract 'smollm2-135m-eagle3'" in capsys.readouterr().err


def test_not_a_prepared_directory(tmp_path, capsys):
    assert main(["check-captures", str(tmp_path), "--contract", str(CONTRACT)]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    assert main(["check-captures", str(tmp_path / "nope"), "--contract", str(CONTRACT)]) == 2
    assert "no such capture directory" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text("{}")  # a record file given instead of its directory
    assert main(["check-captures", str(tmp_path / "manifest.json"), "--contract", str(CONTRACT)]) == 2
    assert f"a file, not a capture directory: give the directory serve-hooks' --out wrote ({tmp_path}" in \
        capsys.readouterr().err


def test_the_engine_runs_known_prompts_name_requests_by_prompt():
    """build_captures (the project's own engine runs) goes through the same attribution and numbers
    requests by the prompt they served; a request matching no prompt is an error naming it."""
    from eagle3_conformance.tools.sglang_engine.captures import build_captures

    extend, decode = build_captures(_session(), [[10, 11, 20, 21], [10, 11, 12, 13]], [], {})
    assert [c.provenance["request"] for c in extend] == [1, 0]
    assert [c.where for c in decode] == ["engine verify step 0, request 1", "engine verify step 1, request 1"]
    with pytest.raises(ValueError, match="matches no prompt"):
        build_captures(_session(), [[10, 11, 12, 13]], [], {})


def test_serve_adds_the_cpu_recipe_unless_the_user_named_it():
    from eagle3_conformance.serving.serve import server_command

    cmd = server_command(["--model-path", "M"], "cpu")
    assert cmd[1:] == ["-m", "sglang.launch_server", "--model-path", "M", "--device", "cpu",
                       "--attention-backend", "torch_native"]
    cmd = server_command(["--model-path", "M", "--attention_backend=triton"], "cpu")
    assert cmd[-2:] == ["--device", "cpu"] and "torch_native" not in cmd
    assert server_command(["--model-path", "M"], "cuda")[3:] == ["--model-path", "M"]


def test_serve_without_server_arguments_is_a_usage_error(capsys):
    from eagle3_conformance.serving.serve import main as serve_main

    with pytest.raises(SystemExit) as e:
        serve_main(["--device", "cpu", "--"])
    assert e.value.code == 2 and "no sglang.launch_server arguments" in capsys.readouterr().err


def test_serve_is_a_verb_that_passes_the_launch_arguments_unchanged(monkeypatch, capsys):
    """Issue 41 item 6: ``eagle3-conformance serve [--device D] -- ARGS`` is the module launcher's verb."""
    import eagle3_conformance.serving.serve as launcher

    seen = []
    monkeypatch.setattr(launcher, "serve", lambda args, device="auto": seen.append((list(args), device)) or 0)
    assert main(["serve", "--device", "cpu", "--", "--model-path", "M", "--device", "cuda"]) == 0
    assert main(["serve", "--", "--model-path", "M"]) == 0
    assert seen == [(["--model-path", "M", "--device", "cuda"], "cpu"), (["--model-path", "M"], "auto")]
    assert main(["serve"]) == 2 and "no sglang.launch_server arguments" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # launch arguments go after '--'
        main(["serve", "--model-path", "M"])
    assert e.value.code == 2


def test_decode_is_never_reported_checked_without_decode_records():
    from eagle3_conformance.serving.captures import mode_findings

    graphed = mode_findings({"target EXTEND": 3, "draft EXTEND": 3}, 3, 0)
    assert [(f.check, f.status) for f in graphed] == [("decode_observed", "skip")]
    assert "decode NOT checked" in graphed[0].message and "CUDA graphs" in graphed[0].message
    assert mode_findings({"draft EXTEND": 3, "target TARGET_VERIFY": 9, "draft DRAFT_EXTEND_V2": 9}, 3, 9) == []
    assert [f.check for f in mode_findings({"draft DECODE": 4}, 0, 0)] == ["extend_observed", "decode_observed"]


def test_the_engine_as_reference_needs_a_directory_that_recorded_the_boundaries(tmp_path, capsys):
    d = tmp_path / "eng"
    assert main(["serve-hooks", "--contract", str(CONTRACT), "--out", str(d), "--conformance-reference", "engine"]) == 0
    specs = json.loads(capsys.readouterr().out)
    assert [s["target_modules"] for s in specs[1:4]] == [["model.embed_tokens"], ["model.layers.0"], ["model.layers.1"]]
    assert specs[0]["config"]["reference"]["boundaries"][-2:] == ["B_30", "F"]
    plain = _prepared(tmp_path)  # transformers only: no boundaries recorded
    _factory(plain)
    _model(plain)
    (plain / "4242-000000.pt").write_bytes(b"")  # never read: refused before
    capsys.readouterr()
    assert main(["check-captures", str(plain), "--contract", str(CONTRACT), "--conformance-reference", "engine"]) == 2
    assert "prepared without the target's boundaries" in capsys.readouterr().err


def test_the_server_factory_marks_its_call_and_records_kv_slots_of_cached_prefixes(tmp_path):
    """server_recorder called as SGLang calls it (from a frame holding ``model_runner``): the factory
    marker, the model facts on the first forward, and a target EXTEND record whose cached prefix
    (positions starting at 2) carries the KV slots of ``req_to_token[req_pool_idx, :2]``."""
    from types import SimpleNamespace

    from eagle3_conformance.tools.sglang_engine.server_hooks import server_recorder

    req_to_token = torch.arange(40, dtype=torch.int32).reshape(4, 10) + 100

    def finalize_cuda_graph_capture(model_runner):  # SGLang's caller, as far as the factory looks
        return server_recorder({"out_dir": str(tmp_path), "record_factory":
                                "eagle3_conformance.tools.sglang_engine.hooks:draft_input_recorder"})

    hook = finalize_cuda_graph_capture(SimpleNamespace(req_to_token_pool=SimpleNamespace(req_to_token=req_to_token)))
    cfg = SimpleNamespace(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=30,
                          hidden_size=576, vocab_size=49152)
    model = SimpleNamespace(embed_tokens=object(), config=cfg, layers_to_capture=[2, 15, 27])
    fb = SimpleNamespace(forward_mode=SimpleNamespace(name="EXTEND"), req_pool_indices=_t([3]), seq_lens=_t([4]),
                         extend_seq_lens=_t([2]), extend_seq_lens_cpu=[2], out_cache_loc=_t([7, 8]),
                         positions=_t([2, 3]))
    hook(model, (_t([20, 21]), _t([2, 3]), fb), None)
    marker = json.loads(next(tmp_path.glob("factory-*.json")).read_text())
    assert marker["sglang_version"] == "0.5.23" and marker["req_to_token_found"] is True
    facts = json.loads(next(tmp_path.glob("model-*-target.json")).read_text())
    assert (facts["num_hidden_layers"], facts["hidden_size"], facts["layers_to_capture"]) == (30, 576, [2, 15, 27])
    rec = torch.load(next(tmp_path.glob("*.pt")), weights_only=True)
    assert rec["prefix_locs"].tolist() == [130, 131] and rec["extend_prefix_lens"].tolist() == [2]
    assert rec["out_cache_loc"].tolist() == [7, 8]
