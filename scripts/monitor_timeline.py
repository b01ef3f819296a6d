"""The README's picture of the monitor's acceptance timeline: ``python scripts/monitor_timeline.py
MONITOR.json OUT.png`` draws the timeline of an ``eagle3-conformance monitor --json`` document (the
same figure ``--html`` embeds, :mod:`eagle3_conformance.htmlreport.timeline`).

The README's ``docs/monitor-timeline.png`` is drawn from the ``fault`` scenario of
``benchmarks/bench_monitor.py`` (``<out>/fault-monitor.json``); docs/monitor.md gives the run.
Exit 2 when the file is not a monitor document.
"""

import json
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    from eagle3_conformance.htmlreport.timeline import save_png

    try:
        doc = json.loads(open(argv[0], encoding="utf-8").read())
    except (OSError, ValueError) as e:
        print(f"{argv[0]}: cannot read it as JSON ({e})", file=sys.stderr)
        return 2
    if not isinstance(doc, dict) or doc.get("kind") != "eagle3-conformance monitor":
        print(f"{argv[0]}: not an eagle3-conformance monitor --json document", file=sys.stderr)
        return 2
    save_png(doc, argv[1])
    print(f"{argv[1]} written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
