"""`ppwtop demo`: the live TUI on the built-in simulated GPU (no hardware needed).

``--headless`` runs the S simulated seconds as fast as the engine goes (one attribution of
the whole run), writes the snapshot to ``--export`` and prints the top classes by energy.
"""

from __future__ import annotations

from pathlib import Path

from attribution.snapshot import Snapshot, rows_by_energy
from ppwtop.cli.common import MAX_SIM_SECONDS, parser, positive_float, seed_int, sim_seconds
from ppwtop.errors import PpwtopError
from ppwtop.terminal import need_terminal

GPUS = ("v100", "a100", "h100", "h200", "rtx3090", "rtx4090")


def summary(snap: Snapshot, top: int = 5) -> str:
    """A short text summary: totals, then top kernels and idle causes by energy."""
    t = snap.totals
    dur = snap.window.duration_s
    lines = [f"ppwtop demo: {t.energy_j:.1f} J in {dur:.1f} s "
             f"({t.energy_j / dur if dur > 0 else 0.0:.1f} W avg), closure error "
             f"{t.closure_error * 100:+.2f}%"]
    if snap.steps is not None and snap.steps.count:
        st = snap.steps
        lines.append(f"steps: {st.count}, {st.energy_j.mean:.3f} J/step, "
                     f"p95 {st.latency_ms.p95:.1f} ms, p99 {st.latency_ms.p99:.1f} ms")
    lines.append("top kernels (J):")
    for k in rows_by_energy(snap.kernels)[:top]:
        mark = "" if k.resolvable else "  ≈ not resolvable"
        lines.append(f"  {k.energy_j:10.1f}  {k.name}{mark}")
    if snap.copies:
        lines.append("copies (J):")
        for c in rows_by_energy(snap.copies)[:top]:
            lines.append(f"  {c.energy_j:10.1f}  {c.kind}/{c.memory}")
    lines.append("idle causes (J):")
    for i in rows_by_energy(snap.idle)[:top]:
        lines.append(f"  {i.energy_j:10.1f}  {i.cause}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = parser("demo", "The live TUI on the built-in simulated GPU (no hardware needed).")
    ap.add_argument("--scenario", default="demo", help="simulator scenario (default: demo)")
    ap.add_argument("--gpu", default="h100", choices=GPUS, metavar="MODEL",
                    help=f"GPU preset: {', '.join(GPUS)} (default: h100)")
    ap.add_argument("--seconds", type=sim_seconds, default=60.0,
                    help=f"simulated seconds (1 to {MAX_SIM_SECONDS:g}, default: 60)")
    ap.add_argument("--seed", type=seed_int, default=0, help="simulator seed (default: 0)")
    ap.add_argument("--headless", action="store_true",
                    help="no screen: run the S seconds at once, print a summary")
    ap.add_argument("--export", type=Path, default=None,
                    help="with --headless: write the last snapshot JSON here")
    ap.add_argument("--sla-ms", type=positive_float, default=None, metavar="X",
                    help="step-latency SLA: the header shows p95/p99 against it and the "
                         "share of steps within it")
    ap.add_argument("--export-dir", type=Path, default=None,
                    help="where 'e' in the TUI writes snapshots (default: current directory)")
    args = ap.parse_args(argv)
    if not args.headless:  # the cheap checks before the run is simulated
        from attribution.sim.scenarios import SCENARIOS

        if args.export is not None:
            raise PpwtopError("--export needs --headless (press 'e' in the TUI to export)")
        if args.scenario in SCENARIOS:  # else DemoFeed's own error names the known ones
            need_terminal("demo", "use --headless")
    if args.export is not None:
        from ppwtop.snapshot_io import check_output

        check_output(args.export)  # before the simulated run
    from ppwtop.demo_feed import DemoFeed

    feed = DemoFeed(args.scenario, args.gpu, args.seconds, seed=args.seed)
    if args.headless:
        snap = feed.final_snapshot()
        if snap is None:
            raise PpwtopError("the simulated run has no GPU activity")
        from ppwtop.panel_feed import with_sla

        snap = with_sla(snap, args.sla_ms)
        if args.export is not None:
            from ppwtop.snapshot_io import write_snapshot

            write_snapshot(snap, args.export)
        print(summary(snap))
        return 0
    from ppwtop.panel_feed import PanelFeed
    from ppwtop.tui.app import PpwtopApp

    app = PpwtopApp(PanelFeed(feed, sla_ms=args.sla_ms), export_dir=args.export_dir)
    return app.run_for_status()
