"""The report's critical-path section: per run, each cause's share of the steps' critical paths
and its free delta (rl/critical_path.py), and the chain of the last step."""
from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

# Chain elements shown for the last step (the rest are summed into one "..." line).
MAX_CHAIN_ELEMENTS = 12


def section(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """HTML: one table per run that has a ``critical_path``; '' when none has."""
    parts = []
    for name, s in summaries.items():
        crit = s.get("critical_path")
        if not crit or not crit.get("steps"):
            continue
        # the steady steps (1..N-1), as the headline figures, where the run has them
        shown = crit.get("steady") or crit
        window = ("steady steps 1..N-1, as the headline; whole run, warm-up step included: "
                  f"{crit['step_time_s']:,.4g} s" if "steady" in crit else "whole run")
        causes = [c for c, v in shown["free_delta_s"].items() if v > 0]
        rows = "".join(f"<tr><td>{html.escape(c)}</td><td>{shown['share'][c]:.1%}</td>"
                       f"<td>{shown['free_delta_s'][c]:,.4g}</td></tr>" for c in causes)
        title = f"Critical path: {name}" if len(summaries) > 1 else "Critical path"
        parts.append(f"<h2>{html.escape(title)}</h2><p class='note'>Mean step {shown['step_time_s']:,.4g} s ({window}); "
                     f"bottleneck {html.escape(crit['bottleneck'])}. Free delta = seconds per step the cause "
                     "holds on the path (the saving were it free: exact on a serial schedule, an upper bound "
                     "where work overlaps). A cause's share of the path is not its bubble share above: the path "
                     "counts the time the step waits on it (long_tail: the last sequences of a round being "
                     "generated), the bubbles count devices idle (long_tail: devices left without a "
                     "sequence).</p><table><tr><th>cause</th><th>share of path</th>"
                     f"<th>free delta (s / step)</th></tr>{rows}</table>" + _last_chain(crit["steps"][-1]))
    return "".join(parts)


def _last_chain(step: Mapping[str, Any]) -> str:
    items = []
    for element in step["chain"][:MAX_CHAIN_ELEMENTS]:
        first, count = element["ranks"]
        where = f"{element['pool']} {first}" + (f"-{first + count - 1}" if count > 1 else "")
        seq = element.get("sequence")
        what = f", sequence {seq['sample']} ({seq['response_len']} tokens)" if seq else ""
        trainer = element.get("trainer")
        if trainer:
            stage, held = max(((part, s) for part, s in trainer["s_by_part"].items() if part.startswith("stage ")),
                              key=lambda item: item[1])
            what += f", {stage} holds {held:,.4g} s of its chain"
        items.append(f"<li>{html.escape(element['phase'])} on {html.escape(where)}{html.escape(what)}: "
                     f"{element['end_s'] - element['start_s']:,.4g} s</li>")
    if len(step["chain"]) > MAX_CHAIN_ELEMENTS:
        items.append(f"<li>... {len(step['chain']) - MAX_CHAIN_ELEMENTS} more</li>")
    return (f"<p class='note'>Chain of step {step['iteration']} ({step['length_s']:,.4g} s):</p>"
            f"<ol class='note'>{''.join(items)}</ol>")
