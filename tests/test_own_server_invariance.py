"""``check-invariance`` (docs/own-server.md, "Your server against itself"), fast: the flow from request to
verdict on a stand-in HTTP server, and every bad input (exit 2, one line).

Why a stand-in: the fast tier cannot start SGLang's real server (1.5-3 min a start on the shared 2-core
machine). :class:`StandIn` answers SGLang 0.5.23's routes the tool calls (``/server_info``, ``/flush_cache``,
``/generate`` with ``input_ids``, ``rid``, ``return_logprob``) and, for each ``/generate`` call, writes the
records SGLang's hooks write for one prefill forward (a target EXTEND with ``rids``, its cached prefix's KV
slots on a prefix hit, and the draft EXTEND: the ``tests/test_own_server.py`` shapes), so the phases, the run
tag, the read-back, the pairing and the check are exercised here; the same flow runs on the real server in
tests/test_own_server_invariance_live.py (soak tier), which this stand-in answers for. It models no engine
behaviour that is judged: every draft row is a function of (token, position), so a variation differs from
the plain run only where a test makes it.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest
import torch

from eagle3_conformance.cli import main
from eagle3_conformance.environment.ports import free_port
from tests.test_own_server import CONTRACT, _factory, _model, _prepared, _t

W = 3 * 576  # the SmolLM2 contract's K * d


def _row(tok: int, pos: int) -> torch.Tensor:
    return torch.sin(torch.arange(W, dtype=torch.float32) * 1e-3 * (tok % 97 + 1) + pos)


class StandIn:
    """The stand-in server (module docstring). ``fault``: ``"logprob-rows"`` (a forward that returns logprobs
    hands the draft perturbed rows), ``"prefix-rows"`` (so does a prefix-cache hit), ``"bfloat16"`` (the draft's
    rows are bfloat16: a server launched with ``--dtype bfloat16``), ``"logprob-500"`` (such a request answers HTTP 500), ``"plain-500"``
    (every request does), ``"dies"`` (after 3 ``/generate`` calls it closes each connection unanswered); ``info``: ``/server_info``'s fields; ``records``: where it records (default DIR)."""

    def __init__(self, d: Path, fault: str = "", info: "dict | None" = None, records: "Path | None" = None):
        self.d, self.fault, self.records = d, fault, records or d
        self.info = {"version": "0.5.23", "chunked_prefill_size": 4096, "tp_size": 1, "disable_radix_cache": False,
                     **(info or {})}
        self.n, self.loc, self.cache, self.seen = 0, 0, [], []
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), self._handler())
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.http.shutdown()
        self.http.server_close()

    def _save(self, rec: dict) -> None:
        torch.save(rec, self.records / f"4242-{self.n}.pt")
        self.n += 1

    def generate(self, body: dict) -> list:
        chunk = self.info["chunked_prefill_size"]
        if len(body["input_ids"]) == 1 and chunk < len(body["input_ids"][0]):
            return self.chunked(body["input_ids"][0], body["rid"][0], chunk)
        ids, rids = body["input_ids"], body["rid"]
        logprob = bool(body.get("return_logprob"))
        toks, pos, locs, prefix_locs, shifted, rows = [], [], [], [], [], []
        for p in ids:
            hit = max([k for toks0, locs0 in self.cache for k in range(len(p)) if toks0[:k] == p[:k]] or [0])
            hit = min(hit, len(p) - 1)
            prefix_locs += next(locs0[:hit] for toks0, locs0 in self.cache if toks0[:hit] == p[:hit]) if hit else []
            mine = list(range(self.loc, self.loc + len(p) - hit))
            self.loc += len(mine)
            self.cache.append((list(p), list(prefix_locs[-hit:] if hit else []) + mine))
            toks.append(p[hit:]), pos.append(list(range(hit, len(p)))), locs.append(mine)
            shifted.append(p[hit + 1:] + [7])
            bad = (logprob and self.fault == "logprob-rows") or (hit and self.fault == "prefix-rows")
            rows += [_row(t, j) * (1.5 if bad else 1.0) for t, j in zip(p[hit:], range(hit, len(p)))]
        n = len(ids)
        self._save(dict(role="target", mode="EXTEND", input_ids=_t(sum(toks, [])), positions=_t(sum(pos, [])),
                        req_pool_indices=_t(list(range(n))), seq_lens=_t([len(p) for p in ids]),
                        extend_seq_lens=_t([len(x) for x in toks]), layers_to_capture=[2, 15, 27],
                        out_cache_loc=_t(sum(locs, [])), extend_prefix_lens=_t([q[0] for q in pos]),
                        prefix_locs=_t(prefix_locs), rids=list(rids), return_logprob=logprob))
        h = torch.stack(rows).to(torch.bfloat16 if self.fault == "bfloat16" else torch.float32)
        self._save(dict(role="draft", mode="EXTEND", input_ids=_t(sum(shifted, [])), positions=_t(sum(pos, [])),
                        req_pool_indices=_t(list(range(n))), seq_lens=_t([len(p) for p in ids]),
                        extend_seq_lens=_t([len(x) for x in toks]), hidden=h, fc_input=h.clone(),
                        num_accept_tokens=None))
        return [{"output_ids": [7], "meta_info": {"id": r}} for r in rids]

    def chunked(self, p: list, rid: str, chunk: int) -> list:
        """One prompt prefilled in chunks of ``chunk`` tokens: each chunk a target EXTEND whose prefix is the earlier
        chunks' KV slots; its draft EXTEND's last input id is the prompt's next token (``fault="chunk-end-guess"``:
        the target's guess, 7, as SGLang before #26329 did: R84)."""
        locs = list(range(self.loc, self.loc + len(p)))
        self.loc += len(p)
        for s in range(0, len(p), chunk):
            e = min(s + chunk, len(p))
            nxt = p[e] if e < len(p) and self.fault != "chunk-end-guess" else 7
            self._save(dict(role="target", mode="EXTEND", input_ids=_t(p[s:e]), positions=_t(list(range(s, e))),
                            req_pool_indices=_t([0]), seq_lens=_t([e]), extend_seq_lens=_t([e - s]),
                            layers_to_capture=[2, 15, 27], out_cache_loc=_t(locs[s:e]), extend_prefix_lens=_t([s]),
                            prefix_locs=_t(locs[:s]), rids=[rid], return_logprob=False))
            h = torch.stack([_row(t, j) for t, j in zip(p[s:e], range(s, e))])
            self._save(dict(role="draft", mode="EXTEND", input_ids=_t(p[s + 1:e] + [nxt]),
                            positions=_t(list(range(s, e))), req_pool_indices=_t([0]), seq_lens=_t([e]),
                            extend_seq_lens=_t([e - s]), hidden=h, fc_input=h.clone(), num_accept_tokens=None))
        return [{"output_ids": [7], "meta_info": {"id": rid}}]

    def _handler(self):
        owner = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, code: int, doc) -> None:
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/server_info" and owner.fault != "not-sglang":
                    return self._reply(200, owner.info)
                self._reply(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/flush_cache":
                    owner.cache.clear()
                    return self._reply(200, "Cache flushed.")
                owner.seen.append(body)
                if owner.fault == "dies" and len(owner.seen) > 3:  # the server process is gone: no reply
                    self.close_connection = True
                    return
                if owner.fault == "plain-500" or (owner.fault == "logprob-500" and body.get("return_logprob")):
                    return self._reply(500, {"error": {"message": "IndexError: list index out of range"}})
                self._reply(200, owner.generate(body))

        return H


def _served(tmp_path) -> Path:
    d = _prepared(tmp_path)
    _factory(d)
    _model(d)
    return d


def _run(url: str, d: Path, tmp_path: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    rc = main(["check-invariance", str(CONTRACT), "--server", url, "--captures", str(d), "--json", str(out), *extra])
    return rc, json.loads(out.read_text()) if out.exists() else {}


def _by_variation(doc: dict, status: str) -> dict:
    out: dict = {}
    for f in doc["findings"]:
        if f["check"] == "engine_invariance" and f["status"] == status:
            out.setdefault(f["where"].split(":")[0], []).append(f)
    return out


def test_every_request_level_variation_is_sent_compared_and_shown_to_have_happened(tmp_path, capsys):
    d = _served(tmp_path)
    with StandIn(d) as s:
        rc, doc = _run(s.url, d, tmp_path)
    out = capsys.readouterr().out
    assert rc == 0, [f for f in doc["findings"] if f["status"] == "fail"]
    passed = _by_variation(doc, "pass")
    for name in ("batch", "input-logprobs", "prefix-cache-repeat", "prefix-cache-shared"):
        assert any(f["slot"] == "variation" for f in passed[name]), name  # the records show it happened
        assert {f["slot"] for f in passed[name]} >= {"rows", "token", "position", "slot 0", "slot 1", "slot 2"}
    logprob = [b for b in s.seen if b.get("return_logprob")]
    assert logprob and all(0 < b["logprob_start_len"] < len(b["input_ids"][0]) for b in logprob)  # inside the prompt
    assert all(r.startswith(doc["meta"]["run_tag"] + ":") for b in s.seen for r in b["rid"])
    assert "seconds per variation: plain" in out and "not varied: chunked-prefill" in out
    assert set(doc["meta"]["seconds_per_variation"]) == {"plain", "batch", "input-logprobs", "prefix-cache-repeat",
                                                         "prefix-cache-shared"}


def test_a_variation_that_changes_the_drafts_rows_fails_naming_variation_row_and_slot(tmp_path, capsys):
    d = _served(tmp_path)
    with StandIn(d, fault="logprob-rows") as s:
        rc, doc = _run(s.url, d, tmp_path)
    assert rc == 1
    failed = _by_variation(doc, "fail")
    assert set(failed) == {"input-logprobs"}, failed
    f = next(x for x in failed["input-logprobs"] if x["slot"] == "slot 0")
    assert f["message"].startswith("row 0, slot 0: relative difference 0.5 to the plain run") and \
        "norm ratio 1.5" in f["message"], f["message"]


def test_every_variation_with_a_failed_finding_is_summarised_as_failed_and_named_in_the_text(tmp_path, capsys):
    d = _served(tmp_path)
    with StandIn(d, fault="prefix-rows") as s:
        rc, doc = _run(s.url, d, tmp_path)
    out = capsys.readouterr().out
    assert rc == 1
    assert set(_by_variation(doc, "fail")) == {"prefix-cache-repeat", "prefix-cache-shared"}
    summary = {f["where"].split(": ")[-1]: f for f in doc["findings"] if f["check"] == "engine_variations"}
    for name in ("prefix-cache-repeat", "prefix-cache-shared"):
        assert summary[name]["status"] == "fail" and "engine_invariance finding(s) failed" in \
            summary[name]["message"], summary[name]
    line = " ".join(out.split("\nfailing variations:")[1].split("\nnot varied:")[0].split())  # the text names each
    assert "prefix-cache-repeat (6 engine_invariance finding(s) failed)" in line and \
        "prefix-cache-shared (6 engine_invariance finding(s) failed)" in line and "batch" not in line, line
    assert summary["batch"]["status"] == summary["input-logprobs"]["status"] == "pass"


def test_a_server_serving_another_dtype_than_the_contract_fails_dtype_as_check_captures_does(tmp_path, capsys):
    d = _served(tmp_path)
    with StandIn(d, fault="bfloat16") as s:
        rc, doc = _run(s.url, d, tmp_path)
    out = capsys.readouterr().out
    assert rc == 1, out
    bad = [f for f in doc["findings"] if f["check"] == "dtype" and f["status"] == "fail"]
    assert bad and {(f["expected"], f["observed"]) for f in bad} == {("float32", "bfloat16")}
    assert "serving-dtype" in json.dumps(doc.get("diagnoses", doc)), doc.keys()
    assert "VIOLATIONS" in out and "CONFORMS" not in out and "serving-dtype" in out, out[-2000:]
    # the rows are judged at the noise of the dtype served (0.2 relative difference), not float32's 0.0447
    slots = [f for f in doc["findings"] if f["check"] == "engine_invariance" and f["slot"] == "slot 0"]
    assert slots and all(f["expected"] == "relative difference <= 0.2" for f in slots), slots[0]


def test_a_second_run_into_the_same_directory_pairs_only_its_own_requests(tmp_path, capsys):
    d = _served(tmp_path)
    with StandIn(d) as s:
        rc1, doc1 = _run(s.url, d, tmp_path)
        rc2, doc2 = _run(s.url, d, tmp_path)
    assert rc1 == rc2 == 0
    assert doc1["meta"]["run_tag"] != doc2["meta"]["run_tag"] and doc1["meta"]["counts"] == doc2["meta"]["counts"]


def test_a_variation_the_server_breaks_under_fails_and_the_rest_are_judged(tmp_path, capsys):
    d = _served(tmp_path)
    with StandIn(d, fault="logprob-500") as s:
        rc, doc = _run(s.url, d, tmp_path)
    assert rc == 1
    (f,) = [x for x in doc["findings"] if x["check"] == "engine_variations" and x["status"] == "fail"]
    assert "input-logprobs: the engine failed where the plain run did not: HTTP 500" in f["message"]
    assert set(_by_variation(doc, "pass")) == {"batch", "prefix-cache-repeat", "prefix-cache-shared"}


def test_what_is_fixed_per_server_is_reported_with_the_servers_values(tmp_path, capsys):
    d = _served(tmp_path)
    with StandIn(d, info={"chunked_prefill_size": 16, "tp_size": 2, "disable_radix_cache": True}) as s:
        rc, doc = _run(s.url, d, tmp_path)
    assert rc == 0
    skips = {f["where"].split(": ")[-1]: f["message"] for f in doc["findings"]
             if f["check"] == "engine_variations" and f["status"] == "skip"}
    assert "chunked_prefill_size 16 < the 48-token prompts, so every run here, the plain one too, is chunked" in \
        skips["chunked-prefill"]
    assert "tp_size 2 for every run here" in skips["tp2"]
    assert "--disable-radix-cache" in skips["prefix-cache-repeat"] and "--disable-radix-cache" in \
        skips["prefix-cache-shared"]
    assert set(_by_variation(doc, "pass")) == {"batch", "input-logprobs"}


@pytest.mark.parametrize("case,message", [
    ("no-dir", "no such capture directory"),
    ("a-file", "a file, not a capture directory"),
    ("no-factory", "no server called this directory's hook factory"),
    ("server-down", "cannot reach the server"),
    ("not-sglang", "not an SGLang server"),
    ("records-elsewhere", "none of this run's requests"),
    ("plain-500", "the plain run failed (HTTP 500"),
    ("dies", "the server went away during phase plain after 3 requests: the connection was dropped "
             "(RemoteDisconnected: Remote end closed connection"),
    ("bad-variation", "--variations 'batch,chunked': unknown variation(s) ['chunked']"),
    ("another-release", "SGLang 0.5.24; these hooks know SGLang 0.5.23"),
    ("nothing-to-vary", "--variations chunked-prefill,tp2: none can be varied on the server at http://127.0.0.1:"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case, message):
    d = tmp_path / "nope" if case == "no-dir" else _prepared(tmp_path) if case == "no-factory" else _served(tmp_path)
    if case == "a-file":
        d = tmp_path / "caps.pt"
        d.write_bytes(b"")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    extra = {"bad-variation": ["--variations", "batch,chunked"],
             "nothing-to-vary": ["--variations", "chunked-prefill,tp2"]}.get(case, [])
    with StandIn(d, fault=case, records=elsewhere if case == "records-elsewhere" else None,
                 info={"version": "0.5.24"} if case == "another-release" else None) as s:
        url = f"http://127.0.0.1:{free_port()}" if case == "server-down" else s.url
        capsys.readouterr()
        rc, _ = _run(url, d, tmp_path, *extra)
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_reference_whose_tokenizer_does_not_fit_the_contract_is_refused_before_any_request(tmp_path, capsys):
    """A --reference of another model than the contract's target (here: the contract says a 10000-token
    vocabulary, the SmolLM2 tokenizer has 49152) would send ids the server does not have: refused first."""
    from eagle3_conformance.testbed.trained_draft import ensure_trained_draft

    small = tmp_path / "small-vocab.yaml"
    small.write_text(CONTRACT.read_text().replace("vocab_size: 49152", "vocab_size: 10000", 1))
    target = ensure_trained_draft().target_dir
    d = _served(tmp_path)
    with StandIn(d) as s:
        capsys.readouterr()
        rc = main(["check-invariance", str(small), "--server", s.url, "--captures", str(d), "--reference", str(target)])
    err = capsys.readouterr().err
    assert rc == 2 and not s.seen, err
    assert f"{target}: its tokenizer's vocabulary (49152 tokens" in err and "target.vocab_size 10000" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def _served2(tmp_path) -> Path:
    d = _prepared(tmp_path / "second")
    (d / "factory-4343-0.json").write_text(json.dumps({"pid": 4343, "sglang_version": "0.5.23"}))
    _model(d)
    return d


@pytest.mark.parametrize("fault", ["", "chunk-end-guess"])
def test_a_second_server_with_chunk_ends_inside_the_prompts_is_the_chunked_prefill_variation(tmp_path, capsys, fault):
    d, d2 = _served(tmp_path), _served2(tmp_path)
    with StandIn(d) as s, StandIn(d2, fault=fault, info={"chunked_prefill_size": 16}) as s2:
        rc, doc = _run(s.url, d, tmp_path, "--variations", "batch", "--second-server", s2.url, "--second-captures",
                       str(d2))
    out = capsys.readouterr().out
    assert "chunked-prefill: second server" in out and "chunked_prefill_size 16" in out
    mine = [f for f in doc["findings"] if f["where"].startswith("chunked-prefill:")]
    shown = [f for f in mine if f["slot"] == "variation"]
    assert shown and shown[0]["status"] == "pass" and shown[0]["observed"]["chunks"] == 3, shown  # 3 chunks: 16, 32
    if not fault:
        assert rc == 0 and all(f["status"] == "pass" for f in mine), mine
        return
    assert rc == 1
    bad = [x for x in mine if x["status"] == "fail"]
    assert len(bad) == 2 and {x["slot"] for x in bad} == {"token"}, bad  # one per prompt, only the token
    f = bad[0]
    assert f["slot"] == "token" and f["message"].startswith("row 15: the draft's input token is 7 under this "
                                                           "variation"), f["message"]
    assert "the prompt's token at 16 is" in f["message"]


@pytest.mark.parametrize("info2,message", [
    ({}, "varies nothing of chunked prefill"),
    ({"chunked_prefill_size": 16, "tp_size": 2}, "differs from --server in both"),
])
def test_a_second_server_must_differ_in_exactly_one_fixed_flag(tmp_path, capsys, info2, message):
    d, d2 = _served(tmp_path), _served2(tmp_path)
    with StandIn(d) as s, StandIn(d2, info=info2) as s2:
        capsys.readouterr()
        rc, _ = _run(s.url, d, tmp_path, "--second-server", s2.url, "--second-captures", str(d2))
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
