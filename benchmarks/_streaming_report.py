"""The report of benchmarks/streaming.py (its markdown and verdicts, from its results), with
the targets, the broker and the command under test that it states."""

from __future__ import annotations

import math
import re
from typing import Any

from _common import generated_line, pass_mark
from _verdicts import MIN_DRAIN_TICKS, STATUS_TICK_S, drain_replay_ratio

from kernelstream.kafka_client import apache, apache_broker, local_broker
from kernelstream.kafka_client.clients import READ_DEFAULTS
from kernelstream.kafka_client.confluent import confluent_available
from kernelstream.kafka_client.producers import KAFKA_PYTHON_LINGER_MS, LINGER_MS

# The width and scaling are given, so both commands learn the same rows with the same model,
# and the stream starts at once: with gamma=auto or --scale auto it would first read its
# topic's head, and a stream started before its producer (the live phase, whose probes come
# every 0.5 s) waits up to --width-wait for it, which would be measured as start-up time.
LEARNER_ARGS = ["-l", "bogd", "-p", "budget=200", "-p", "gamma=0.5", "--scale", "none"]
LATENCY_TARGET_MS = 100.0  # p99 at 1k events/s
RATIO_TARGET = 0.5  # stream drain rate / file replay rate
REQUIRED_RATES = (1000, 5000)

# the two message shapes of the backlog: each event carries its label ("LABEL FEATURES"), or
# each event ("? FEATURES") is followed at once by its label record ("label:Y", same key)
SHAPES = {"labelled": "labelled events (one record per event: label and features)",
          "pairs": "event + label record (`? FEATURES`, then `label:Y` with the same key: "
                   "two records per event)"}
BACKLOG_KEY = {"labelled": "backlog", "pairs": "backlog_pairs"}  # results keys by shape

# --broker: every phase (floor included) runs on it; each broker has its own results file
BROKERS = ("tansu", "apache")
TANSU = {"name": "tansu", "label": "tansu",
         "detail": "local tansu (memory storage, 127.0.0.1), one partition per topic"}


def results_stem(broker: str) -> str:
    """The results file's stem: ``streaming`` on tansu (the original file), else
    ``streaming_BROKER``, so a run on one broker never overwrites the other's figures."""
    return "streaming" if broker == "tansu" else f"streaming_{broker}"


def broker(name: str) -> tuple[Any, dict[str, str]]:
    """The broker ``name`` (:data:`BROKERS`) as a context manager, and how the report names it."""
    if name == "tansu":
        return local_broker, TANSU
    return apache_broker, {
        "name": name, "label": f"Apache Kafka {apache.KAFKA_VERSION}",
        "detail": "one KRaft node (broker and controller in one JVM, "
                  f"`{' '.join(apache.JVM_OPTIONS)}`) from the Maven jars, started as "
                  "tests/kafka/test_apache_kafka.py starts it (`kafka_client.apache_broker`), "
                  "logs on local disk, 127.0.0.1, one partition per topic"}


def stream_kafka() -> str:
    """The stream's own Kafka client settings, its defaults whatever the broker (no
    ``--kafka-option`` is given unless ``--stream-arg`` does)."""
    if confluent_available():
        import confluent_kafka

        client = (f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
                  f"{confluent_kafka.libversion()[0]})")
        linger = LINGER_MS
    else:
        client, linger = "kafka-python", KAFKA_PYTHON_LINGER_MS
    return (f"client {client} (`--kafka-client auto`); reader fetch wait "
            f"{READ_DEFAULTS['fetch_max_wait_ms']} ms, fetch min bytes 1 (a fetch may return as "
            f"soon as one record is there); predictions "
            f"producer acks=all, linger {linger} ms")


_RAISE = re.compile(r"fetch_max_wait_ms (\d+) -> (\d+) ms")


def fetch_wait_raises(log: str) -> list[int]:
    """The fetch waits (ms) the stream's reader raised itself to (its FetchWait warnings in
    the stream's log): the setting it really read with, when not its default."""
    return [int(m.group(2)) for m in _RAISE.finditer(log)]


def verdict(st: dict[str, Any]) -> str:
    if st["rate"] == REQUIRED_RATES[0]:
        ok = st["p99"] <= LATENCY_TARGET_MS and st["arrived"] == st["sent"]
        return (f"{pass_mark(ok)} (p99 ≤ {LATENCY_TARGET_MS:.0f} ms); "
                f"{'bounded' if st['bounded'] else 'unbounded'}")
    return "bounded" if st["bounded"] else "**unbounded**"


def render(a: Any, res: dict[str, Any], started: str, minutes: float) -> list[str]:
    br = res.get("broker") or TANSU  # results of before --broker: tansu
    L = ["# Streaming: event-to-prediction latency, sustained rate, ratio to the file replay"
         + ("" if br["name"] == "tansu" else f" ({br['label']})"),
         "", generated_line("streaming.py", started, f"wall time {minutes:.1f} min"), "",
         f"* Machine: {res['machine']}; load average (1/5/15 min) {res['load_start']} at the "
         f"start, {res['load_end']} at the end (a shared machine: the other tenants' load is "
         "in the 'machine busy' figures below).",
         f"* Command: `{res.get('command', '?')}`; code: git {res.get('git_head', '?')}.",
         f"* Command under test: `kernelstream stream kafka://…/TOPIC {' '.join(LEARNER_ARGS)} "
         "--n-features D --runner direct --out … --checkpoint … [--kafka-out kafka://…/PREFIX "
         "--kafka-outputs predictions, live phases] "
         f"--max-seconds …{' ' + ' '.join(a.stream_arg) if a.stream_arg else ''}"
         f"{' -- ' + ' '.join(a.beam_option) if a.beam_option else ''}` (BOGD "
         "B = 200), a subprocess per phase, stopped with SIGINT.",
         f"* Broker: **{br['label']}**, every phase (the floor too): {br['detail']}. Test "
         "clients (kafka-python), each in its own process: producer linger 0 ms, acks 1; "
         "consumer fetch wait ≤ 10 ms, polling every ≤ 50 ms.",
         *([f"* The stream's Kafka settings (its defaults, the same on every broker): "
            f"{res['stream_kafka']}. {raised_note(res)}"] if res.get("stream_kafka") else []),
         "* Data:"]
    for name, note in res["data"].items():
        L.append(f"  * {name}: {note}")
    fl = res.get("floor")
    if fl:
        L.append(f"* Floor (producer → broker → consumer on one topic, no stream, "
                 f"{fl['rate']:,} records/s): p50 {fl['p50']:.1f} ms, p99 {fl['p99']:.1f} ms "
                 f"({fl['samples']:,} samples). The stream path crosses the broker twice "
                 "(events in, predictions out).")
    L.append("")
    rows = [(name, st) for name, d in res["datasets"].items()
            for st in (d.get("live") or {}).get("steps", [])]
    if rows:
        lt = "its own topic" if a.labels_topic else "the same topic (label-only records)"
        L += ["## Event-to-prediction latency on live traffic", "",
              f"Measured on {br['label']} (the floor above too). Feature records at a "
              f"steady rate (label `?`; key = event id; record timestamp = send time); each "
              f"label follows on {lt} after a seeded random delay (exponential, mean "
              f"{a.label_delay_ms:g} ms, at most 5× that), so the stream reads two records "
              f"per event and learns as labels arrive. Latency = arrival "
              f"of the prediction on `PREFIX-predictions` (consumer wall clock) − its "
              f"`event_time_ms`. {a.step_seconds:g} s per rate; the first {a.warmup:g} s of "
              f"each rate are dropped (samples = the rest). *Bounded*: every prediction "
              f"arrived, p99 ≤ {a.bound_ms:g} ms, and the median of the last quarter of the "
              f"samples is at most 100 ms above the first quarter's (no growing queue).", "",
              "| data | rate (events/s) | achieved | predictions | samples | p50 (ms) | "
              "p99 (ms) | max (ms) | stream CPU | machine busy (others) | verdict |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for name, st in rows:
            late = st["arrived"] < st["sent"]
            ms = {k: "–" if st["samples"] == 0 else f"{st[k]:.{0 if k == 'max' else 1}f}"
                  + ("*" if late else "") for k in ("p50", "p99", "max")}
            L.append(f"| {name} | {st['rate']:,} | {st['achieved']:,.0f} | "
                     f"{st['arrived']:,} / {st['sent']:,} | {st['samples']:,} | {ms['p50']} | "
                     f"{ms['p99']} | {ms['max']} | {100 * st['stream_cpu_share']:.0f} % | "
                     f"{100 * st['load']['busy']:.0f} % ({100 * st['load']['others']:.0f} %) | "
                     f"{verdict(st)} |")
        L += ["", "* *predictions*: arrived within the drain timeout / events sent; where some "
              "are missing, the latencies (*) are of those that arrived only, so the true "
              "ones are higher.",
              "* *stream CPU*: CPU time of the stream process tree / wall time of the rate "
              "(100 % = one core); *machine busy*: share of both cores in use, by everything; "
              "*others*: the part not used by this benchmark's processes (broker, stream, "
              "clients), i.e. other tenants of the shared machine.", ""]
        fl = res.get("floor")
        for name, st in rows:
            if st["rate"] != REQUIRED_RATES[0] or not st["samples"]:
                continue
            line = (f"* {name} at {st['rate']:,} events/s on {br['label']}: event → "
                    f"prediction p50 {st['p50']:.1f} ms, p99 {st['p99']:.1f} ms")
            if fl and fl["samples"]:
                line += (f"; the broker hop alone (floor, this run, {br['label']}) p50 "
                         f"{fl['p50']:.1f} ms, p99 {fl['p99']:.1f} ms; two hops in the "
                         f"stream path, so the stream's own share of the median is about "
                         f"{st['p50'] - 2 * fl['p50']:.1f} ms")
            L.append(line + ".")
        L.append("")
    L += ["## Largest sustained rate and the file replay", "",
          "* *drain rate*: a backlog is on the topic before the stream starts, which writes "
          "Parquet outputs only; records learnt (the stream's status file: each count with the "
          "time the stream reached it) from the first count past 10 % to the last / the time "
          f"between them (start-up excluded), in events/s; the median of {a.backlog_runs} "
          "drains, each on a fresh topic and stream (every run's rate in the notes below). "
          "Two message shapes, each measured in this run: "
          + "; ".join(f"*{k}*: {v}" for k, v in SHAPES.items()) + ".",
          "* *largest bounded live rate*: the highest rate of the table above that stayed "
          "bounded (live traffic: two records per event).",
          "* *file replay*: `kernelstream replay FILE "
          f"{' '.join(LEARNER_ARGS)} --runner direct` on the same rows as a LIBSVM file "
          "(a subprocess; the replay learns them in its permutation 0, the same work). "
          f"End-to-end wall clock, {a.replay_runs} runs on N rows "
          "each followed by a run on the first `small` rows; rate = (N − small) / the median "
          "over runs of wall(N) − wall(small), so interpreter start, imports and pipeline "
          "start cancel out as they do for the drain rate, and so does a shared machine's "
          "drift between runs. " + replay_noise(res) + " (summary.json's "
          "`examples_per_second` is learner time only; shown in brackets, not used.)",
          f"* *ratio* = drain rate / replay rate, in the same run (target ≥ {RATIO_TARGET}, "
          "each shape), with its interval [min drain rate / replay rate's upper end, max "
          "drain rate / its lower end]: PASS only when the whole interval is ≥ the target, "
          "FAIL when all of it is below, *inconclusive* when it straddles the target (the "
          "noise is as large as what is measured: more `--replay-runs`, a larger "
          "`--backlog` or a quieter machine); *too short* when a drain window was under "
          f"{MIN_DRAIN_TICKS} status ticks ({MIN_DRAIN_TICKS * STATUS_TICK_S:g} s) or "
          f"{MIN_DRAIN_TICKS} status counts.",
          "", "| data | shape | backlog events | drain rate (events/s; min–max) | stream CPU "
          "(µs/event) | largest bounded live rate | replay (ex/s; interval) | replay wall N / "
          "small (s) | ratio [interval] | verdict |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, d in res["datasets"].items():
        r, lv = d.get("replay"), d.get("live")
        bounded = [s["rate"] for s in (lv or {}).get("steps", []) if s["bounded"]]
        d["ratios"] = {}
        for shape, key in BACKLOG_KEY.items():
            b = d.get(key)
            if not b and not (shape == "labelled" and (r or lv)):
                continue
            rv = (drain_replay_ratio(b.get("drain_rates", [b["drain_rate"]]),
                                     b.get("too_short"), r, RATIO_TARGET)
                  if b and r and "rate_lo" in r else None)
            if rv is not None:
                d["ratios"][shape] = rv
            lo_hi = (f" ({b['drain_spread'][0]:,.0f}–{b['drain_spread'][2]:,.0f})"
                     if b and "drain_spread" in b else "")
            L.append(
                f"| {name} | {shape} | {b['events']:,} | {b['drain_rate']:,.0f}{lo_hi} | "
                f"{b['stream_cpu_per_event_us']:.0f} | " if b
                else f"| {name} | {shape} | – | – | – | ")
            L[-1] += (f"{max(bounded):,} | " if bounded else ("none | " if lv else "– | "))
            if r:
                le = f" [{r['learner_eps']:,.0f}]" if r.get("learner_eps") else ""
                iv = (f" ({fmt_rate(r['rate_lo'])}–{fmt_rate(r['rate_hi'])})"
                      if "rate_lo" in r else "")
                L[-1] += (f"{fmt_rate(r['rate'])}{iv}{le} | {r['median_wall']:.2f} / "
                          f"{r['median_wall_small']:.2f} | ")
            else:
                L[-1] += "– | – | "
            L[-1] += (f"{rv['ratio']:.3f} [{rv['lo']:.2f}, {fmt_rate(rv['hi'], '.2f')}] | "
                      f"{ratio_mark(rv['verdict'])} (≥ {RATIO_TARGET}) |"
                      if rv is not None else "– | – |")
    L.append("")
    for name, d in res["datasets"].items():
        for shape, key in BACKLOG_KEY.items():
            b = d.get(key)
            if b:
                runs = ", ".join(f"{x:,.0f}" for x in b.get("drain_rates", [b["drain_rate"]]))
                n_rec = b.get("records", b["events"])
                short = (f" **too short to measure** ({b['too_short']});"
                         if b.get("too_short") else "")
                win = (f" over {b['window_s']:.2f} s ({b['window_samples']} status counts)"
                       if "window_s" in b else "")
                L.append(f"* {name} backlog ({shape}): drain rates {runs} events/s;{short} the "
                         f"median run{win}: first records learnt "
                         f"{b['first_prediction_s']:.1f} s after the stream started, last "
                         f"{b['start_to_last_s']:.1f} s; {b['arrived']:,} of {n_rec:,} "
                         f"records learnt; machine busy {100 * b['load']['busy']:.0f} % "
                         f"(others {100 * b['load']['others']:.0f} %); exit code "
                         f"{b['exit_code']}.")
        lv = d.get("live")
        if lv:
            L.append(f"* {name} live: first prediction of a probe {lv['ready_s']:.1f} s "
                     f"after the stream started; {lv['duplicates']} duplicate predictions; "
                     f"exit code {lv['exit_code']}.")
    return L


def raised_note(res: dict[str, Any]) -> str:
    """Where the stream's reader raised its fetch wait in this run (:func:`fetch_wait_raises`
    per phase), or that it never did."""
    where = []
    for name, d in res["datasets"].items():
        for key in (*BACKLOG_KEY.values(), "live"):
            ms = (d.get(key) or {}).get("fetch_wait_raises") or []
            if ms:
                where.append(f"{name} {key.replace('_', ' ')} to {max(ms)} ms")
    if not where:
        return "The reader never raised its fetch wait in this run."
    return ("The reader raised its fetch wait (no records behind the high watermark for 1 s): "
            + "; ".join(where) + ".")


def passed(res: dict[str, Any]) -> bool:
    ok = True
    for d in res["datasets"].values():
        for st in (d.get("live") or {}).get("steps", []):
            if st["rate"] == REQUIRED_RATES[0]:
                ok = ok and st["p99"] <= LATENCY_TARGET_MS and st["arrived"] == st["sent"]
        for rv in (d.get("ratios") or {}).values():
            ok = ok and rv["verdict"] == "PASS"  # inconclusive or too short: not a pass
    return ok


def fmt_rate(x: float, spec: str = ",.0f") -> str:
    return "∞" if x == math.inf else ("–" if x != x else format(x, spec))


def ratio_mark(verdict: str) -> str:
    return pass_mark(True) if verdict == "PASS" else (
        pass_mark(False) if verdict == "FAIL" else f"**{verdict}**")


def replay_noise(res: dict[str, Any]) -> str:
    """The sentence on the replay's noise, from this run's measurements."""
    parts = []
    for name, d in res["datasets"].items():
        r = d.get("replay")
        if not r or "min_diff" not in r:
            continue
        wr = r.get("wall_range", {})
        parts.append(
            f"{name}: wall(N) − wall(small) {r['median_diff']:.2f} s (median; min "
            f"{r['min_diff']:.2f}, max {r['max_diff']:.2f}, IQR {r['iqr_diff']:.2f}) over "
            f"{len(r['diffs'])} runs, the walls themselves spanning "
            + ", ".join(f"{v:.2f} s ({int(k):,} rows)" for k, v in wr.items())
            + f"; rate interval {fmt_rate(r['rate_lo'])}–{fmt_rate(r['rate_hi'])} ex/s (the "
            f"min–max of the differences holds their median with probability "
            f"{100 * r['coverage']:.0f} %)")
    return ("Measured in this run: " + "; ".join(parts) + "." if parts else "")
