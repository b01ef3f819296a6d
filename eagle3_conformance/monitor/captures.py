"""From an alarm to its cause: the server's recent ``serve-hooks`` records judged with ``check-captures``' logic.

Where the server was started with ``serve-hooks``' ``--forward-hooks`` value (docs/own-server.md), the
directory holds what its draft was handed. On an alarm the monitor judges the records of the newest
server process (all of them: a request's rows are attributed through its cached prefix, whose KV slots
were written by earlier forwards of the same process, so a slice of the latest records attributes
nothing; measured on the real server, docs/monitor.md) (the one serving now: after a restart onto a new draft the old process's records
describe the old draft) with the same functions ``check-captures`` calls
(:func:`eagle3_conformance.serving.captures.read_dir` / ``judge``, then
:func:`eagle3_conformance.diagnose.diagnose`), so the alarm carries the same diagnosis and fix
``check-captures`` would print (for example "slot 0 is B_0 ... write [1, 14, 26]").

The server is still writing: a record that cannot be read yet is most likely the one being written;
unreadable records are left out of the judgement and counted, not reported as a violation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from eagle3_conformance.core.errors import InputError


def newest_pid(directory: Path) -> Optional[str]:
    """The pid of the newest server process that called the hook factory (its marker is the newest)
    and wrote a record; None when none did."""
    marks = sorted(Path(directory).glob("factory-*.json"), key=lambda p: p.stat().st_mtime)
    for m in reversed(marks):
        pid = m.stem.split("-")[1]
        if any(Path(directory).glob(f"{pid}-*.pt")):
            return pid
    return None


def judge_recent(directory: str, c, *, reference: str, max_captures: int, reference_dir: Optional[Path],
                 last: Optional[int] = None) -> dict[str, Any]:
    """The newest server process's records in ``directory``, judged for contract ``c``.

    Args:
        reference: ``transformers`` (the target's forward at ``reference_dir``) or ``engine`` (the
            boundaries the server recorded: ``serve-hooks --conformance-reference engine``).

    Returns:
        ``last``: only that process's last records (None: all; a slice loses the cached prefixes).
        ``{"verdict", "pid", "records", "unreadable", "judged", "diagnoses": [{"kind", "title", "evidence",
        "fix"}], "failing": [messages], "seconds"}``, or ``{"error": why}`` when the directory cannot be
        judged (never raises on its content).
    """
    from eagle3_conformance import report
    from eagle3_conformance.diagnose import diagnose
    from eagle3_conformance.serving.captures import judge, read_dir

    t0 = time.time()
    try:
        pid = newest_pid(Path(directory))
        if pid is None:
            return {"error": f"{directory}: no server process that called the hook factory wrote a record"}
        sd = read_dir(Path(directory), c, engine_reference=reference == "engine", pid=pid, last=last)
        recs = [r for r in sd.streams.get(pid, []) if "broken" not in r]
        sd.streams = {pid: recs}
        unreadable = sum(1 for n, _ in sd.broken if n.startswith(f"{pid}-"))
        sd.broken = []
        if reference == "engine":
            findings, meta = judge(c, sd, "engine", max_captures)
        else:
            from eagle3_conformance.suite.assess import reference_loader

            if reference_dir is None:
                return {"error": f"{c.name}: no reference target (target.path or fixture) to judge the records with"}
            findings, meta = judge(c, sd, reference_loader(c, reference_dir), max_captures)
    except InputError as e:
        return {"error": str(e)}
    diagnoses = diagnose(c, findings)
    kind, text = report.verdict(findings)
    return {"verdict": text.split(":")[0].split("(")[0].strip(), "pid": pid, "records": len(recs),
            "unreadable": unreadable, "judged": meta.get("judged"), "seconds": round(time.time() - t0, 1),
            "diagnoses": [{"kind": d.kind, "title": d.title, "evidence": list(d.evidence), "fix": list(d.fix)}
                          for d in diagnoses],
            "failing": [f"{f.check} {f.slot or ''}: {f.message}" for f in findings if f.status == "fail"][:8]}
