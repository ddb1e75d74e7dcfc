"""The figures of a bench_http run as one plain-text table, to paste into a closing note."""

from __future__ import annotations

from typing import Any

# The Host's parts first, in the order a request goes through them.
ORDER = ("gateway", "workflow", "workflow runtimes", "queue", "queue runtimes", "projections", "kafka", "postgres")


def _ms(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def _pair(run: dict[str, Any], key: str) -> str:
    a, b = run.get(f"{key}_p50_ms"), run.get(f"{key}_p99_ms")
    return "-" if a is None else f"{_ms(a)}/{_ms(b)}"


def table(closed: list[dict[str, Any]], opened: list[dict[str, Any]], floors: dict[str, float]) -> str:
    out: list[str] = []
    row = "{:<16}{:>9}{:>10}{:>14}{:>14}{:>18}"
    if closed:
        out += ["closed loop", row.format("system", "inst", "steps/s", "step ms", "POST ms", "create->done ms")]
        out += [
            row.format(
                r["system"].replace("sumi/http", "sumi"),
                r["instances"],
                r["steps_per_s"],
                _pair(r, "step"),
                _pair(r, "post"),
                _pair(r, "create_to_complete"),
            )
            for r in closed
        ]
        out.append("(ms as p50/p99)")
    if opened:
        row = "{:<6}{:>8}{:>10}{:>13}{:>15}{:>9}{:>14}{:>6}{:>5}"
        out += ["", f"open loop, {opened[0]['instances'] / opened[0]['offered_per_s']:g} s per rate (ms as p50/p99)"]
        out.append(
            row.format(
                "system", "offered", "achieved", "POST ms", "create->done", "<=1 s %", "late p99/max", "fail", "ok"
            )
        )
        for r in opened:
            out.append(
                row.format(
                    r["system"][:4],
                    f"{r['offered_per_s']:g}/s",
                    f"{r['achieved_per_s']:g}/s",
                    _pair(r, "post"),
                    _pair(r, "complete"),
                    r["on_time_pct"],
                    f"{_ms(r['sender_late_p99_ms'])}/{_ms(r['sender_late_max_ms'])}",
                    r["failed"],
                    "yes" if r["sustainable"] else "no",
                )
            )
        out.append("ok: POST p99 <= 100 ms, create->done p99 <= 1 s, >= 99.9 % done within 1 s, none failed")
        cols: list[tuple[str, dict[str, float]]] = []
        for r in opened:
            if not cols or not cols[-1][0].startswith(r["system"][:4]):
                cols.append((f"{r['system'][:4]} idle/s", r["idle_cpu_ms_per_s"]))
            cols.append((f"{r['system'][:4]} {r['offered_per_s']:g}/s", r["cpu_ms_per_step"]))
        seen = {part for _, cpu in cols for part in cpu}
        parts = [p for p in ORDER if p in seen] + sorted(seen - {*ORDER, "total", "bench client"})
        parts += ["total", "bench client"]
        out += ["", "CPU ms per committed step (total: all but the bench client); idle/s: CPU ms per second at rest"]
        out.append(f"{'part':<28}" + "".join(f"{name:>12}" for name, _ in cols))
        for part in parts:
            out.append(
                f"{part:<28}" + "".join(f"{cpu[part]:>12.3g}" if part in cpu else f"{'':>12}" for _, cpu in cols)
            )
    out += ["", "floors (p50)"] + [f"  {k}: {v:g}" for k, v in floors.items()]
    return "\n".join(out)
