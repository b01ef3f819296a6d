"""Acceptance of a running server, watched (issue 44): ``eagle3-conformance monitor``.

Reads the server's own Prometheus endpoint (SGLang ``--enable-metrics``, vLLM), sends no traffic of
its own, and judges acceptance per window against an ``accept --record`` baseline with a sequential
drift test whose false-alarm rate is stated; on an alarm it runs the ``accept`` canary on the held-out
prompts and judges the server's ``serve-hooks`` records, so the alarm says what broke and how to fix it.

- :mod:`.metrics`: one scrape, parsed with ``prometheus_client``'s parser, as counters;
- :mod:`.windows`: scrapes -> windows, through restarts (counter resets), failed scrapes, idle time;
- :mod:`.drift`: the CUSUM, its threshold, run lengths and the expected time to detect (pure);
- :mod:`.judge`: calibration on the baseline and the first windows, alarms;
- :mod:`.canary`, :mod:`.captures`: from an alarm to its cause;
- :mod:`.exposition`: the verdict as Prometheus metrics (``--prometheus-port``);
- :mod:`.session`: the loop; :mod:`.render`: the report (text, JSON; the HTML timeline is
  :mod:`eagle3_conformance.htmlreport.timeline`).
"""
