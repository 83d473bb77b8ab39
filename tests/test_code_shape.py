"""The shape rules the schedule layer keeps (issue 10): small functions in simulator/rl/."""
import ast
from pathlib import Path

RL = Path(__file__).resolve().parents[1] / "simulator" / "rl"
MAX_LINES = 80


def test_every_function_in_rl_is_under_80_lines():
    long = []
    for path in sorted(RL.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= MAX_LINES:
                    long.append(f"{path.relative_to(RL.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions of 80 lines or more: " + ", ".join(long)
