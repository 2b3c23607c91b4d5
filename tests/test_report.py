"""`ppwtop report`: Markdown and HTML on hand-built snapshots, with and without a baseline."""

from __future__ import annotations

import dataclasses
import html
import re
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest

from attribution.snapshot import (
    CopyRow,
    GpuInfo,
    IdleRow,
    Inefficiency,
    KernelRow,
    Quantiles,
    SensorInfo,
    Snapshot,
    Steps,
    Totals,
    Window,
)
from ppwtop.cli.main import main

EVIL = '<script>alert("x")</script>'


def make_snapshot(scale: float = 1.0, n_kernels: int = 20, steps: bool = True,
                  extra: dict[str, object] | None = None) -> Snapshot:
    """A consistent snapshot: kernels + copies + idle sum to the total."""
    kernels = []
    for i in range(n_kernels):
        name = EVIL if i == 0 else f"gemm_{i}|tile" if i == 1 else f"kernel_{i}"
        e = scale * (100.0 - i)
        kernels.append(KernelRow(
            name=name, gpu=0, calls=10 + i, time_s=e / 200.0, energy_j=e,
            dynamic_energy_j=0.6 * e, dynamic_energy_ci_j=(0.5 * e, 0.7 * e),
            avg_power_w=200.0, resolvable=i != 2, precision="bf16",
            cluster="kernel_3" if i == 2 else None,
            why="fixed mix with kernel_3" if i == 2 else "",
        ))
    copies = (CopyRow("HtoD", "pageable", 0, 4, 1 << 20, 0.01, 5.0 * scale, 2.0 * scale),)
    idle = (IdleRow("host_stall", 0, 0.5, 40.0 * scale, 3),
            IdleRow("launch_gap", 0, 0.2, 16.0 * scale, 100))
    k_e = sum(k.energy_j for k in kernels)
    c_e = sum(c.energy_j for c in copies)
    i_e = sum(r.energy_j for r in idle)
    total = k_e + c_e + i_e
    st = None
    if steps:
        n = 50
        per = total / n
        st = Steps(count=n, energy_j=Quantiles(per, per, per * 1.05, per * 1.1),
                   latency_ms=Quantiles(20.0 * scale, 20.0 * scale, 22.0 * scale,
                                        25.0 * scale),
                   items_per_j=32 * n / total, sla_ms=30.0, sla_compliance=0.96,
                   step_energy_j=tuple(per * (1 + 0.01 * ((j % 5) - 2)) for j in range(n)))
    ineff = (
        Inefficiency(1, "idle.host_stall", 40.0 * scale, 40.0 * scale / total,
                     "3 stalls > 1 ms", "prefetch the next batch", "data-loader team",
                     "`ppwtop diff` shows idle.host_stall falling",
                     energy_ci_j=(35.0 * scale, 45.0 * scale)),
        Inefficiency(2, f"kernel:{EVIL}", 100.0 * scale, 100.0 * scale / total,
                     "low occupancy", "fuse <b>bias</b>", "kernels", "kernel energy drops"),
    )
    return Snapshot(
        gpus=(GpuInfo(0, "NVIDIA A100-SXM4-40GB", "a100",
                      SensorInfo("instant", 100.0, 25.0, 1.5)),),
        window=Window(0, int(10e9)),
        totals=Totals(total, k_e, c_e, i_e, 55.0, total * 1.01, -0.0099),
        kernels=tuple(kernels), copies=copies, idle=idle, steps=st, inefficiencies=ineff,
        extra=extra or {},
    )


def write(path: Path, snap: Snapshot) -> Path:
    path.write_bytes(orjson.dumps(snap.to_dict()))
    return path


def table_rows(md: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading``."""
    section = md.split(heading, 1)[1]
    rows = []
    started = False
    for line in section.splitlines():
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows.append(cells)
        elif started:
            break
    assert len(rows) >= 2, f"no table after {heading}"
    assert set("".join(rows[1])) <= set("-")
    return rows[2:]


def test_markdown_without_baseline(tmp_path: Path) -> None:
    snap = write(tmp_path / "s.json", make_snapshot())
    out = tmp_path / "r.md"
    assert main(["report", str(snap), "-o", str(out)]) == 0
    md = out.read_text()
    for h in ("Headline operating points", "Energy breakdown", "Bottleneck ranking", "Kernels",
              "Idle by cause", "Intervention plan", "Verdict"):
        assert f"## {h}" in md
    kernels = table_rows(md, "## Kernels")
    assert len(kernels) == 15  # top 15 of 20
    assert "top 15 of 20" in md
    energies = [float(r[4]) for r in kernels]
    assert energies == sorted(energies, reverse=True)
    assert kernels[0][0] == html.escape(EVIL, quote=False)
    assert EVIL not in md
    assert kernels[1][0] == "gemm_1\\|tile"  # the pipe does not split the row
    assert "not resolvable" in kernels[2][-1] and kernels[3][-1] == "yes"
    idle = table_rows(md, "## Idle by cause")
    assert [r[0] for r in idle] == ["host_stall", "launch_gap"]
    ops = {r[0]: r for r in table_rows(md, "## Headline operating points")}
    s = make_snapshot()
    assert s.steps is not None
    assert float(ops["energy per step"][2]) == pytest.approx(s.steps.energy_j.mean, rel=1e-3)
    assert float(ops["SLA compliance"][2]) == pytest.approx(96.0)
    assert float(ops["average power"][2]) == pytest.approx(s.totals.energy_j / 10, rel=1e-3)
    breakdown = table_rows(md, "## Energy breakdown")
    shares = [float(r[2].rstrip(" %")) for r in breakdown]
    assert sum(shares) == pytest.approx(100.0, abs=0.2)
    assert "No baseline given" in md
    plan = md.split("## Intervention plan", 1)[1]
    assert plan.count("--fail-on-regression") == 2
    # our own code spans stay code (they were shown as literal backticks), names' do not
    assert "`ppwtop diff` shows idle.host_stall falling" in md and "\\`" not in md
    assert "<code>ppwtop diff</code> shows idle.host_stall falling" in html_report(tmp_path)
    from ppwtop.report.markdown import esc, prose
    assert esc("op`1") == "op\\`1" and prose("run `x`|y") == "run `x`\\|y"


def html_report(tmp_path: Path) -> str:
    snap = write(tmp_path / "h.json", make_snapshot())
    out = tmp_path / "r.html"
    assert main(["report", str(snap), "-o", str(out)]) == 0
    return out.read_text()


def test_markdown_with_baseline_has_before_after_and_verdict(tmp_path: Path) -> None:
    base = write(tmp_path / "a.json", make_snapshot(1.0))
    cand = write(tmp_path / "b.json", make_snapshot(1.3))
    out = tmp_path / "r.md"
    assert main(["report", str(cand), "--baseline", str(base), "-o", str(out)]) == 0
    md = out.read_text()
    ops = {r[0]: r for r in table_rows(md, "## Headline operating points")}
    before, after = float(ops["energy per step"][2]), float(ops["energy per step"][3])
    assert after / before == pytest.approx(1.3, rel=1e-3)
    assert ops["energy per step"][4].startswith("+30.0 %") and "worse" in ops["energy per step"][4]
    assert "better" not in ops["steps per joule"][4] and "worse" in ops["steps per joule"][4]
    verdict = md.split("## Verdict", 1)[1]
    assert "**regression**" in verdict


def test_a_baseline_on_another_gpu_is_not_called_better_or_worse(tmp_path: Path) -> None:
    """An H100 baseline for an A100 run (found by an audit): the headline said "(better)"
    while the verdict said the runs cannot be compared. Now the top says so, the changes
    carry no label, and the window line names both boards."""
    cand = make_snapshot(1.0)
    h100 = (GpuInfo(0, "NVIDIA H100 80GB HBM3", "h100", cand.gpus[0].sensor),)
    base = write(tmp_path / "a.json", dataclasses.replace(make_snapshot(1.3), gpus=h100))
    out = tmp_path / "r.md"
    assert main(["report", str(write(tmp_path / "b.json", cand)), "--baseline", str(base),
                 "-o", str(out)]) == 0
    md = out.read_text()
    assert "> **warning:** the baseline is not comparable with this run (comparability 0.00" in md
    ops = {r[0]: r for r in table_rows(md, "## Headline operating points")}
    assert ops["energy per step"][4].startswith("-23.1 %")
    assert not any("better" in r[4] or "worse" in r[4] for r in ops.values())
    assert "baseline GPU 0: NVIDIA H100 80GB HBM3 (h100)" in md.splitlines()[2]
    assert 'class="better"' not in html_report_with(tmp_path, base)


def html_report_with(tmp_path: Path, baseline: Path) -> str:
    out = tmp_path / "r.html"
    assert main(["report", str(write(tmp_path / "c.json", make_snapshot(1.0))), "--baseline",
                 str(baseline), "-o", str(out)]) == 0
    return out.read_text()


def test_html_is_self_contained_and_escaped(tmp_path: Path) -> None:
    series = {"t_s": [0.0, 0.1, 0.2, 0.3], "power_w": [60.0, 250.0, 240.0, 70.0]}
    clamps = [{"reason": "sw_power_cap", "energy_j": 12.0, "time_s": 0.4}]
    base = write(tmp_path / "a.json", make_snapshot(1.0))
    cand = write(tmp_path / "b.json",
                 make_snapshot(0.8, extra={"power_series": series, "clamps": clamps}))
    out = tmp_path / "r.html"
    assert main(["report", str(cand), "--baseline", str(base), "-o", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc\s*=", page)  # no external script at all
    assert page.count("<script") >= 3  # plotly.js + one per chart
    assert EVIL not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "fuse &lt;b&gt;bias&lt;/b&gt;" in page
    for div in ("ppw-energy-breakdown", "ppw-operating-points", "ppw-power-timeline"):
        assert f'id="{div}"' in page
    assert "clock-clamp time" in page
    assert "improvement" in page


class _TagBalance(HTMLParser):
    """Checks that structural tags open and close in order (scripts are opaque to it)."""

    CHECKED = frozenset({"html", "head", "body", "table", "thead", "tbody", "tr", "td", "th",
                         "ul", "ol", "li", "div", "p", "h1", "h2", "span", "code", "b"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.CHECKED:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.CHECKED:
            if not self.stack or self.stack[-1] != tag:
                self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            else:
                self.stack.pop()


def test_html_tags_balance(tmp_path: Path) -> None:
    base = write(tmp_path / "a.json", make_snapshot(1.0))
    cand = write(tmp_path / "b.json", make_snapshot(1.1))
    out = tmp_path / "r.html"
    assert main(["report", str(cand), "--baseline", str(base), "-o", str(out)]) == 0
    checker = _TagBalance()
    checker.feed(out.read_text())
    checker.close()
    assert checker.problems == [] and checker.stack == []


def test_html_without_baseline_or_series(tmp_path: Path) -> None:
    snap = write(tmp_path / "s.json", make_snapshot(steps=False))
    out = tmp_path / "r.html"
    assert main(["report", str(snap), "-o", str(out)]) == 0
    page = out.read_text()
    assert 'id="ppw-energy-breakdown"' in page
    assert "ppw-operating-points" not in page and "ppw-power-timeline" not in page
    assert "energy per step" not in page  # no steps, no per-step metric
    assert not re.search(r"<script[^>]*\bsrc\s*=", page)


def test_gzipped_snapshot_is_read(tmp_path: Path) -> None:
    import gzip

    snap = tmp_path / "s.json.gz"
    snap.write_bytes(gzip.compress(orjson.dumps(make_snapshot().to_dict())))
    out = tmp_path / "r.md"
    assert main(["report", str(snap), "-o", str(out)]) == 0
    assert len(table_rows(out.read_text(), "## Kernels")) == 15


def test_bad_suffix_and_bad_input_are_one_line_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = write(tmp_path / "s.json", make_snapshot())
    assert main(["report", str(snap), "-o", str(tmp_path / "r.pdf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppwtop: error:") and err.count("\n") == 1 and ".pdf" in err
    assert not (tmp_path / "r.pdf").exists()
    (tmp_path / "adir.md").mkdir()  # a folder, whatever its name says
    for folder in (tmp_path, tmp_path / "adir.md"):
        assert main(["report", str(snap), "-o", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is a directory" in err

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["report", str(bad), "-o", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppwtop: error:") and str(bad) in err and err.count("\n") == 1

    assert main(["report", str(tmp_path / "missing.json"), "-o", str(tmp_path / "r.md")]) == 2
    assert "no such file" in capsys.readouterr().err

    wrong = tmp_path / "wrong.json"
    wrong.write_bytes(orjson.dumps({"schema": "other"}))
    assert main(["report", str(snap), "--baseline", str(wrong),
                 "-o", str(tmp_path / "r.md")]) == 2
    assert "wrong.json" in capsys.readouterr().err

    assert main(["report", str(snap)]) == 2  # -o is required
    assert capsys.readouterr().err.startswith("ppwtop: error:")
    with pytest.raises(SystemExit) as exc:  # argparse's own --help exit
        main(["report", "--help"])
    assert exc.value.code == 0
    assert "--baseline" in capsys.readouterr().out


def test_closure_is_not_called_perfect_when_nothing_was_measured(tmp_path: Path) -> None:
    measured = make_snapshot()
    unmeasured = dataclasses.replace(measured, totals=dataclasses.replace(
        measured.totals, measured_energy_j=0.0, closure_error=0.0))
    for snap, said in ((measured, "closure error vs measured energy: -1.0 %"),
                       (unmeasured, "not measured (no energy counter reading at both ends")):
        src = write(tmp_path / "s.json", snap)
        for suffix in (".md", ".html"):
            out = tmp_path / f"r{suffix}"
            assert main(["report", str(src), "-o", str(out)]) == 0
            text = out.read_text()
            assert said in text
            assert ("vs measured energy" in text) == (snap is measured)


def test_a_title_that_is_not_utf8_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # found by fuzzing: --title $'\xff' (a lone surrogate in argv) failed in the writer with
    # "internal error: UnicodeEncodeError", after the checks
    snap = write(tmp_path / "s.json", make_snapshot())
    out = tmp_path / "r.md"
    assert main(["report", str(snap), "-o", str(out), "--title", "\udcff"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppwtop: error:") and err.count("\n") == 1
    assert "--title: not valid UTF-8" in err and "internal error" not in err
    assert not out.exists()


def test_a_snapshot_without_power_is_reported_by_time_not_as_zero_joules(
        tmp_path: Path) -> None:
    """Found by an audit on the real Kineto traces (none has a power log): every energy was
    0, so "top 15 by energy" was alphabetical (ResNet-50's three longest kernels left out),
    zeros read as measured with a [0, 0] interval, and the plan said "Nothing to do" on a
    run 33 % host-stalled.  Now: energies n/a, kernels and idle by time, and the plan names
    where the GPU time went."""
    from attribution.engine import attribute
    from ppwtop.report.model import build_report
    from ppwtop.snapshot_io import write_snapshot
    from tests.test_engine import hand_trace

    snap = attribute(hand_trace(seconds=2.0, power=False), n_boot=5)
    assert snap.totals.energy_j == 0.0 and len(snap.kernels) >= 2
    src = tmp_path / "s.json"
    write_snapshot(snap, src)
    for suffix in ("md", "html"):
        out = tmp_path / f"r.{suffix}"
        assert main(["report", str(src), "-o", str(out)]) == 0
        text = out.read_text()
        assert "by time" in text and "by energy" not in text
        assert "[0, 0]" not in text and "Nothing to do" not in text
        assert "no power readings in this snapshot" in text
        assert "of the GPU time" in text
    r = build_report(snap)
    assert not r.energy_known
    times = [k.time_s for k in r.kernels]
    assert times == sorted(times, reverse=True)
    longest = max(snap.kernels, key=lambda k: k.time_s)
    assert r.kernels[0].name == longest.name
    ops = {o.label: o.after for o in r.operating_points}
    assert ops["total energy"] is None and ops["average power"] is None
    # a snapshot with power keeps its energies and its order
    r2 = build_report(make_snapshot())
    assert r2.energy_known and r2.time_view == () and r2.order == "energy"
    joules = [k.energy_j for k in r2.kernels]
    assert all(j is not None for j in joules)
    assert joules == sorted((j for j in joules if j is not None), reverse=True)
    # the lines carry n/a themselves (the renderers only format)
    assert all(k.energy_j is None and k.dynamic_ci_j is None and k.resolvable is None
               for k in r.kernels)
    assert all(i.energy_j is None for i in r.idle) and r.order == "time"


def test_energy_changes_through_another_sensor_field_or_under_the_floor_are_not_judged(
        tmp_path: Path) -> None:
    """The same real run through nvidia-smi's `draw` and `instant` fields (an audit): the
    headline marked −0.3 % energy and −15 % idle share "(better)" and the verdict's table
    gave a +1 353 % share of a −0.09 J delta whose interval spans 0."""
    a = make_snapshot(1.0)
    drawn = (dataclasses.replace(a.gpus[0], sensor=dataclasses.replace(a.gpus[0].sensor,
                                                                       field="draw")),)
    base = write(tmp_path / "a.json", dataclasses.replace(make_snapshot(1.001), gpus=drawn))
    assert a.steps is not None
    cand = write(tmp_path / "b.json", dataclasses.replace(
        a, steps=dataclasses.replace(a.steps, latency_ms=Quantiles(30.0, 30.0, 33.0, 37.5))))
    out = tmp_path / "r.md"
    assert main(["report", str(cand), "--baseline", str(base), "-o", str(out)]) == 0
    md = out.read_text()
    assert "different sensor fields" in md
    ops = {r[0]: r for r in table_rows(md, "## Headline operating points")}
    assert not any("better" in ops[k][4] or "worse" in ops[k][4]
                   for k in ("energy per step", "total energy", "average power"))
    assert "worse" in ops["step latency p95"][4]  # not an energy metric: still judged
    mech = table_rows(md.split("## Verdict", 1)[1], "**neutral**")
    assert mech and all(r[2] == "n/a" for r in mech)
    # the same fields, a change under the diff's 2 % noise floor: no mark either
    base2 = write(tmp_path / "c.json", make_snapshot(1.001))
    assert main(["report", str(write(tmp_path / "d.json", a)), "--baseline", str(base2),
                 "-o", str(out)]) == 0
    ops = {r[0]: r for r in table_rows(out.read_text(), "## Headline operating points")}
    assert ops["total energy"][4] == "-0.1 %"
